"""The gateway's guards: API keys, the request body limit, where it may bind.

Keys are compared in constant time, against every configured key, so neither a
key's prefix nor which key matched shows in the response time. A 401 says
nothing about the session asked for.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
from collections.abc import Sequence

from pydantic import SecretStr
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class ApiKeys:
    """The configured keys; empty means the gateway runs without auth (loopback only)."""

    def __init__(self, keys: Sequence[SecretStr]) -> None:
        self._keys = [k.get_secret_value().encode() for k in keys if k.get_secret_value()]

    @property
    def enabled(self) -> bool:
        """True when at least one key is configured."""
        return bool(self._keys)

    def accepts(self, token: str | None) -> bool:
        """True when auth is off, or ``token`` equals one of the keys."""
        if not self._keys:
            return True
        if not token:
            return False
        given = token.encode()
        matched = False
        for key in self._keys:
            # No early exit: the time taken does not tell which key (if any) matched.
            matched |= hmac.compare_digest(given, key)
        return matched


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, keys: ApiKeys, insecure: bool) -> str | None:
    """Why the gateway must not start on ``host`` (None when it may)."""
    if keys.enabled or is_loopback(host) or insecure:
        return None
    return (
        f"refusing to bind {host} without API keys: set REACTQ_API_KEYS=key1,key2 "
        "(clients send 'Authorization: Bearer KEY'), bind 127.0.0.1, or pass --insecure"
    )


class BodyLimit:
    """ASGI middleware: a request body over ``limit`` bytes gets 413 before it is parsed.

    A declared Content-Length over the limit is refused without reading; a chunked
    body is read up to the limit and refused as soon as it passes it.
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._refuse(send)
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if len(body) > self.limit:
                await self._refuse(send)
                return
            if not message.get("more_body", False):
                break
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": bytes(body), "more_body": False}

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send) -> None:
        payload = json.dumps(
            {
                "code": "request_too_large",
                "message": f"the request body is over the limit of {self.limit} bytes "
                "(REACTQ_MAX_REQUEST_BYTES)",
                "field": "body",
                "errors": [],
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(payload)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": payload})
