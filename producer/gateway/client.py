"""A small async client of the gateway (what ``reactq send/watch --gateway`` use).

Event streams resume by themselves: after a dropped connection the client
reconnects with ``Last-Event-ID`` and the gateway carries on exactly after the
last event it received.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any
from urllib.parse import quote

import httpx2

from reactq.producer.gateway.models import DecisionsAccepted, TurnAccepted
from reactq.shared.content import ContentPart, parse_parts
from reactq.shared.errors import ReactqError
from reactq.shared.events import Event, parse_event


class GatewayRequestError(ReactqError):
    """The gateway refused a request; ``status`` and ``remote_code`` say how."""

    code = "gateway_error"


def _error_class(code: str) -> type[ReactqError]:
    """The shared error class with this code (so callers catch the same errors)."""
    pending: list[type[ReactqError]] = [ReactqError]
    while pending:
        cls = pending.pop()
        if cls.code == code:
            return cls
        pending.extend(cls.__subclasses__())
    return GatewayRequestError


def _raise_for(response: httpx2.Response) -> None:
    if response.status_code < 400:
        return
    try:
        body: dict[str, Any] = response.json()
    except ValueError:
        body = {}
    code = str(body.get("code", "http_error"))
    message = str(body.get("message", response.reason_phrase))
    cls = _error_class(code)
    if cls is GatewayRequestError:
        raise GatewayRequestError(
            f"{message} (HTTP {response.status_code}, {code})",
            status=response.status_code,
            remote_code=code,
        )
    raise cls(message, status=response.status_code)


class GatewayClient:
    """Submit turns and follow events through a reactq gateway over HTTP."""

    def __init__(
        self, base_url: str, api_key: str | None = None, *, max_reconnects: int = 10
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.base_url = base_url.rstrip("/")
        self.max_reconnects = max_reconnects
        self._http = httpx2.AsyncClient(
            base_url=self.base_url,
            headers=headers,
            timeout=httpx2.Timeout(30.0, read=None),
        )

    async def __aenter__(self) -> GatewayClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the HTTP connections."""
        await self._http.aclose()

    async def submit(
        self,
        session_id: str,
        message: str | Sequence[str | ContentPart | Mapping[str, Any]],
        *,
        agent: str,
        strategy: str = "enqueue",
        metadata: dict[str, Any] | None = None,
    ) -> TurnAccepted:
        """POST a turn (text, or content parts as ``Producer.submit`` takes them); raises
        the shared error the gateway reported (by its code)."""
        sent: Any = message
        if not isinstance(message, str):
            sent = [p.model_dump(exclude_none=True) for p in parse_parts(message)]
        body: dict[str, Any] = {"message": sent, "agent": agent, "strategy": strategy}
        if metadata:
            body["metadata"] = metadata
        response = await self._http.post(
            f"/v1/sessions/{quote(session_id, safe='')}/turns", json=body
        )
        _raise_for(response)
        return TurnAccepted.model_validate(response.json())

    async def decide(
        self,
        turn_id: str,
        decisions: dict[str, bool | str],
        *,
        notes: dict[str, str] | None = None,
        by: str | None = None,
        arguments: dict[str, dict[str, Any]] | None = None,
    ) -> DecisionsAccepted:
        """Decide a turn's waiting tool calls (``{call_id: True | False | "reason"}``,
        ``arguments`` replacing an approved call's); raises the shared error the gateway
        reported (``DecisionConflictError``...)."""
        body: dict[str, Any] = {"decisions": decisions, "notes": notes or {}}
        if arguments:
            body["arguments"] = arguments
        if by:
            body["by"] = by
        response = await self._http.post(
            f"/v1/turns/{quote(turn_id, safe='')}/decisions", json=body
        )
        _raise_for(response)
        return DecisionsAccepted.model_validate(response.json())

    def events(
        self, session_id: str, *, after: str | None = "0", turn_id: str | None = None
    ) -> AsyncIterator[Event]:
        """A session's events after ``after`` ("$": live only), resuming on drops."""
        params = {"after": after or "$"}
        if turn_id:
            params["turn_id"] = turn_id
        query = "&".join(f"{k}={quote(v, safe='')}" for k, v in params.items())
        return self.stream(f"/v1/sessions/{quote(session_id, safe='')}/events?{query}", turn_id)

    async def stream(self, url: str, turn_id: str | None = None) -> AsyncIterator[Event]:
        """Follow an events URL (e.g. a ``TurnAccepted.events_url``) until it ends for good.

        With ``turn_id`` it ends after that turn's final; otherwise it follows forever.
        """
        if turn_id is None and "turn_id=" in url:
            turn_id = url.split("turn_id=", 1)[1].split("&", 1)[0]
        last: str | None = None
        failures = 0
        while True:
            headers = {"Last-Event-ID": last} if last else {}
            try:
                async with self._http.stream("GET", url, headers=headers) as response:
                    if response.status_code >= 400:
                        await response.aread()
                        _raise_for(response)
                    async for event in _parse_sse(response.aiter_lines()):
                        last = event.id
                        failures = 0
                        yield event
                        if turn_id is not None and event.type == "final":
                            return
            except (httpx2.TransportError, httpx2.RemoteProtocolError):
                failures += 1
                if failures > self.max_reconnects:
                    raise
            # The gateway ended the stream (a slow reader, a restart) or it dropped: resume.
            await asyncio.sleep(min(0.1 * 2**failures, 2.0))


async def _parse_sse(lines: AsyncIterator[str]) -> AsyncIterator[Event]:
    event_id: str | None = None
    data: list[str] = []
    async for line in lines:
        if line == "":
            if data:
                yield parse_event(json.loads("\n".join(data)), event_id=event_id)
            event_id, data = None, []
        elif line.startswith(":"):
            continue
        else:
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if field == "id":
                event_id = value
            elif field == "data":
                data.append(value)
