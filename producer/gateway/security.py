"""The gateway's guards: who may call it, API keys, request bodies, where it may bind.

Keys are compared in constant time, against every configured key, so neither a
key's prefix nor which key matched shows in the response time. A 401 says
nothing about the session asked for.

An entry of ``REACTQ_API_KEYS`` (itself comma-separated) is::

    key                                   full access, named key1, key2... by position
    name:key                              full access, named
    name:key;prefix=acme-;agents=a|b;ro   scoped

``;`` separates a key from its scopes and ``|`` the agents of ``agents=``: neither
can occur in a session id or an agent name, and neither is the list's ``,``. Any
other scope, an empty one, or one given twice is a ConfigError naming the entry
by its position and name (never its key). What a scope lets a key reach is
``scopes.py``'s.

The guards are plain ASGI middleware that answer from the request's headers:
a request refused (403, 401, 413) is answered before a byte of its body is read,
and on a connection that then closes, so a client cannot make the gateway hold a
body it will never accept. ``BodyLimit`` also gives a body a deadline (408).
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import re
from collections.abc import Sequence
from typing import Any

from pydantic import SecretStr
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from reactq.producer.gateway.errors import shape_for
from reactq.producer.gateway.models import ErrorBody
from reactq.shared.errors import ConfigError
from reactq.shared.tenancy import TenantIdentity

_PREFIX = re.compile(r"[A-Za-z0-9._:-]{1,127}")
_AGENT = re.compile(r"[A-Za-z0-9._:-]{1,128}")


KeyScope = TenantIdentity
"""Who a key is and what it may reach: the identity the gateway stamps on its turns."""


def parse_scopes(name: str, scopes: list[str], position: int) -> KeyScope:
    """The scope of entry ``position`` (named ``name``) from its ``;``-separated parts;
    ConfigError for a malformed one."""

    def bad(why: str) -> ConfigError:
        return ConfigError(
            f"REACTQ_API_KEYS entry {position} ({name}): {why}; scopes are "
            "'prefix=SESSION_PREFIX', 'agents=A|B' and 'ro', after the key, each after a ';'",
            setting="REACTQ_API_KEYS",
        )

    found: dict[str, Any] = {}
    for part in scopes:
        label, sep, value = part.strip().partition("=")
        if not label:
            raise bad("empty scope")
        if label in found:
            raise bad(f"{label!r} given twice")
        if label == "ro" and not sep:
            found["ro"] = True
        elif label == "prefix" and sep:
            if not _PREFIX.fullmatch(value):
                raise bad("prefix= wants 1-127 of [A-Za-z0-9._:-]")
            found["prefix"] = value
        elif label == "agents" and sep:
            agents = value.split("|")
            if not all(_AGENT.fullmatch(a) for a in agents):
                raise bad("agents= wants agent names separated by '|'")
            found["agents"] = frozenset(agents)
        else:
            raise bad(f"unknown scope {part.strip()[:40]!r}")
    return KeyScope(
        name=name,
        prefix=found.get("prefix"),
        agents=found.get("agents"),
        read_only=found.get("ro", False),
    )


# Every refusal closes its connection: the rest of a body left unread cannot keep it.
_CLOSE = (b"connection", b"close")


async def send_error(
    send: Send,
    status: int,
    code: str,
    message: str,
    *,
    field: str | None = None,
    headers: Sequence[tuple[bytes, bytes]] = (),
    scope: Scope | None = None,
) -> None:
    """Answer an ``ErrorBody`` from ASGI middleware and close the connection (the
    request's body, if any, is left unread); under a protocol surface with an error
    shape of its own (``scope``'s path), worded as that surface words errors."""
    body: dict[str, Any] = {"code": code, "message": message, "errors": []}
    if field is not None:
        body["field"] = field
    shape = shape_for(scope.get("app"), scope["path"]) if scope is not None else None
    if shape is not None:
        status, body = shape(status, ErrorBody.model_validate(body))
    payload = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                _CLOSE,
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


_KEY_NAME = re.compile(r"[A-Za-z][A-Za-z0-9._-]{0,63}")


class ApiKeys:
    """The configured keys; empty means the gateway runs without auth (loopback only).

    An entry ``name:key`` names its key: the name is who a request with that key
    is (the ``by`` of the decisions it makes). A bare ``key`` is named ``key1``,
    ``key2``... by its position in the list. Scopes follow the key after ``;``
    (``name:key;prefix=acme-;agents=a|b;ro``, the module's doc); a malformed
    entry is a ConfigError.
    """

    def __init__(self, keys: Sequence[SecretStr]) -> None:
        self._keys: list[tuple[KeyScope, bytes]] = []
        for position, entry in enumerate(keys, 1):
            raw = entry.get_secret_value().strip()
            if not raw:
                continue
            head, semicolon, rest = raw.partition(";")
            name, sep, key = head.partition(":")
            if not (sep and key and _KEY_NAME.fullmatch(name)):
                name, key = f"key{position}", head
            if not semicolon:
                self._keys.append((KeyScope(name=name), key.encode()))
                continue
            if not key or key.endswith(":"):
                raise ConfigError(
                    f"REACTQ_API_KEYS entry {position} ({name}): no key before the scopes",
                    setting="REACTQ_API_KEYS",
                )
            scope = parse_scopes(name, rest.split(";"), position)
            self._keys.append((scope, key.encode()))

    @property
    def enabled(self) -> bool:
        """True when at least one key is configured."""
        return bool(self._keys)

    @property
    def names(self) -> list[str]:
        """The keys' names, in configuration order."""
        return [scope.name for scope, _ in self._keys]

    def scope(self, token: str | None) -> KeyScope | None:
        """The scope of the key ``token`` is (None when it is none of them)."""
        if not token:
            return None
        given = token.encode()
        found: KeyScope | None = None
        for scope, key in self._keys:
            # No early exit: the time taken does not tell which key (if any) matched.
            if hmac.compare_digest(given, key) and found is None:
                found = scope
        return found

    def identify(self, token: str | None) -> str | None:
        """The name of the key ``token`` is (None when it is none of them)."""
        scope = self.scope(token)
        return None if scope is None else scope.name

    def accepts(self, token: str | None) -> bool:
        """True when auth is off, or ``token`` equals one of the keys."""
        return not self._keys or self.identify(token) is not None

    def scope_of_headers(self, headers: Sequence[tuple[bytes, bytes]]) -> KeyScope | None:
        """``scope`` of a request's key (``Authorization: Bearer KEY`` or ``X-Api-Key``;
        None without keys)."""
        if not self._keys:
            return None
        return self.scope(_bearer_token(headers))

    def bearer_accepted(self, headers: Sequence[tuple[bytes, bytes]]) -> bool:
        """``accepts`` for a request's raw headers (``Authorization: Bearer KEY`` or
        ``X-Api-Key: KEY``)."""
        return not self._keys or self.scope(_bearer_token(headers)) is not None


def _bearer_token(headers: Sequence[tuple[bytes, bytes]]) -> str | None:
    """The request's key: ``Authorization: Bearer KEY``, else ``X-Api-Key: KEY`` (the
    header LangGraph's SDKs send, ``api_key=``)."""
    api_key = None
    for header, value in headers:
        name = header.lower()
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").strip().partition(" ")
            return token.strip() if scheme.lower() == "bearer" else None
        if name == b"x-api-key":
            api_key = value.decode("latin-1").strip() or None
    return api_key


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1, and 127.x
    mapped into IPv6, as a dual-stack socket reports an IPv4 client)."""
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


class LoopbackOnly:
    """ASGI middleware of a gateway without API keys: only loopback clients are served.

    Any other client gets 403 saying to set REACTQ_API_KEYS, whatever server runs
    the app (``reactq serve`` refuses such a bind; ``uvicorn ... --host 0.0.0.0``
    does not). The client is the address the server reports: behind a reverse proxy
    uvicorn trusts (``--forwarded-allow-ips``, 127.0.0.1 by default) it is the
    forwarded one, so a proxy does not make every client local. A request with no
    client address (a Unix socket, usually behind a proxy) is refused too.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            client = scope.get("client")
            if client is None or not is_loopback(str(client[0])):
                await send_error(
                    send,
                    403,
                    "loopback_only",
                    "this gateway has no API keys, so it serves loopback clients only: set "
                    "REACTQ_API_KEYS=key1,key2 (clients send 'Authorization: Bearer KEY')",
                    scope=scope,
                )
                return
        await self.app(scope, receive, send)


class RequireKey:
    """ASGI middleware: a request under a guarded path without a valid key gets 401
    from its headers alone, before its body is read.

    The routes check the key too (``Depends``), which documents it in OpenAPI; this
    is what keeps an unauthenticated client from making the gateway read its body.
    """

    def __init__(self, app: ASGIApp, keys: ApiKeys, prefixes: Sequence[str]) -> None:
        self.app = app
        self.keys = keys
        self.prefixes = tuple(prefixes)

    def guards(self, path: str) -> bool:
        """True when ``path`` wants a key."""
        return any(path == p or path.startswith(p.rstrip("/") + "/") for p in self.prefixes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and self.keys.enabled
            and self.guards(scope["path"])
            and not self.keys.bearer_accepted(scope["headers"])
        ):
            await send_error(
                send,
                401,
                "unauthorized",
                "a valid API key is required: send 'Authorization: Bearer KEY'",
                headers=[(b"www-authenticate", b"Bearer")],
                scope=scope,
            )
            return
        await self.app(scope, receive, send)


def check_bind(host: str, keys: ApiKeys, insecure: bool) -> str | None:
    """Why the gateway must not start on ``host`` (None when it may)."""
    if keys.enabled or is_loopback(host) or insecure:
        return None
    return (
        f"refusing to bind {host} without API keys: set REACTQ_API_KEYS=key1,key2 "
        "(clients send 'Authorization: Bearer KEY'), bind 127.0.0.1, or pass --insecure"
    )


def _declares_body(headers: Sequence[tuple[bytes, bytes]]) -> bool:
    for name, value in headers:
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() != b"0"):
            return True
    return False


class BodyLimit:
    """ASGI middleware: a request body over ``limit`` bytes gets 413 before it is parsed,
    one that takes over ``timeout`` seconds to arrive gets 408.

    A declared Content-Length over the limit is refused without reading; a chunked
    body is read up to the limit and refused as soon as it passes it. GET, HEAD and
    OPTIONS bodies are never read: their response closes the connection instead,
    so the rest of such a body cannot keep it open.
    """

    def __init__(self, app: ASGIApp, limit: int, timeout: float = 10.0) -> None:
        self.app = app
        self.limit = limit
        self.timeout = timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["method"] in ("GET", "HEAD", "OPTIONS"):
            if not _declares_body(scope["headers"]):
                await self.app(scope, receive, send)
                return

            async def closing(message: Message) -> None:
                if message["type"] == "http.response.start":
                    message = {**message, "headers": [*message.get("headers", []), _CLOSE]}
                await send(message)

            await self.app(scope, receive, closing)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._too_large(send, scope)
            return
        body = bytearray()
        try:
            # One deadline for the whole body: a byte now and then does not extend it.
            async with asyncio.timeout(self.timeout):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return
                    body += message.get("body", b"")
                    if len(body) > self.limit:
                        await self._too_large(send, scope)
                        return
                    if not message.get("more_body", False):
                        break
        except TimeoutError:
            await send_error(
                send,
                408,
                "request_timeout",
                f"the request body did not arrive within {self.timeout:g} s "
                "(REACTQ_REQUEST_TIMEOUT_SECONDS)",
                field="body",
                scope=scope,
            )
            return
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": bytes(body), "more_body": False}

        await self.app(scope, replay, send)

    async def _too_large(self, send: Send, scope: Scope) -> None:
        await send_error(
            send,
            413,
            "request_too_large",
            f"the request body is over the limit of {self.limit} bytes (REACTQ_MAX_REQUEST_BYTES)",
            field="body",
            scope=scope,
        )
