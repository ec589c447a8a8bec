"""``reactq serve``: the gateway under uvicorn, refusing an unsafe bind.

uvicorn gives a request's headers no deadline: a client that connects and sends
nothing, or half a request head, holds its connection for ever. ``reactq serve``
runs uvicorn's h11 protocol with one (``REACTQ_REQUEST_TIMEOUT_SECONDS``, counted
from the connection, or from the end of the previous response on a kept-alive
one). The body's deadline is the app's own (``BodyLimit``), so it holds under any
server. uvicorn's loggers log through reactq's handler (``uvicorn_log_config``).

A connection the gateway closes while the client may still be sending (a refusal
answered before its body, a 408) closes the way nginx's lingering close does: the
answer goes out, then the gateway's side of the connection (FIN), and what the
client still sends is read and dropped until it closes too, for at most
``LINGER_SECONDS`` and ``LINGER_BYTES``. Closed at once, the socket's unread bytes
make the kernel answer with a reset, which can destroy the answer before the
client has read it: the client saw "connection reset", never the 401.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from reactq.producer.gateway.security import ApiKeys, check_bind
from reactq.shared.logs import uvicorn_log_config
from reactq.shared.settings import Settings

MAX_HEAD_BYTES = 16 * 1024
"""Largest request head (request line and headers) accepted; larger ones get 400."""

LINGER_SECONDS = 5.0
"""Longest a closing connection waits for its client to close, dropping what it sends."""

LINGER_BYTES = 16 * 1024 * 1024
"""Most bytes a closing connection drops before it closes at once."""


class _LingeringTransport:
    """The connection's transport as uvicorn sees it: ``close`` lingers (module doc)
    while the client's request is unfinished; everything else is the transport's own."""

    def __init__(self, transport: asyncio.Transport, unfinished: Callable[[], bool]) -> None:
        self._transport = transport
        self._unfinished = unfinished
        self._timer: asyncio.TimerHandle | None = None
        self.lingering = False
        self.dropped = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    def is_closing(self) -> bool:
        return self.lingering or self._transport.is_closing()

    def close(self) -> None:
        transport = self._transport
        if self.lingering:
            return
        if transport.is_closing() or not self._unfinished() or not transport.can_write_eof():
            transport.close()
            return
        self.lingering = True
        # Sent once the answer is flushed; the client reads it, then its end of file.
        transport.write_eof()
        transport.resume_reading()
        self._timer = asyncio.get_running_loop().call_later(LINGER_SECONDS, self.close_now)

    def drop(self, data: bytes) -> None:
        """Bytes the client sent while the connection lingers."""
        self.dropped += len(data)
        if self.dropped > LINGER_BYTES:
            self.close_now()

    def close_now(self) -> None:
        """Close without lingering (the deadline passed, shutdown, the connection ended)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._transport.close()


class DeadlineH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, with a deadline for each request's head.

    The timer runs while the connection waits for a request head (h11's client
    state is IDLE): from the connection, and again from each response's end. A
    client that sent part of a head by then gets 408; an idle one is closed.
    """

    head_timeout: float = 10.0
    """Seconds a client has to send a request head (set by ``protocol_with_deadline``)."""

    _head_timer: asyncio.TimerHandle | None = None
    _lingering: _LingeringTransport

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._lingering = _LingeringTransport(transport, self._request_unfinished)
        self.transport = self._lingering  # type: ignore[assignment]
        self._watch_head()

    def data_received(self, data: bytes) -> None:
        if self._lingering.lingering:
            self._lingering.drop(data)
            return
        super().data_received(data)
        self._watch_head()

    def shutdown(self) -> None:
        # The server is stopping: a lingering connection would only delay it.
        if self._lingering.lingering:
            self._lingering.close_now()
            return
        super().shutdown()

    def _request_unfinished(self) -> bool:
        """Whether the client may still be sending: a body not read to its end, or
        part of a head."""
        state = self.conn.their_state
        return state is h11.SEND_BODY or (state is h11.IDLE and bool(self.conn.trailing_data[0]))

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._watch_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        if self._lingering.lingering:
            self._lingering.close_now()
        super().connection_lost(exc)

    def _watch_head(self) -> None:
        waiting = self.conn.their_state is h11.IDLE and not self.transport.is_closing()
        if not waiting:
            self._stop_head_timer()
        elif self._head_timer is None:
            self._head_timer = self.loop.call_later(self.head_timeout, self._head_timed_out)

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.conn.their_state is not h11.IDLE or self.transport.is_closing():
            return
        if self.conn.trailing_data[0]:
            # Part of a head arrived: say why the connection ends. Written by hand, since
            # h11 has no request to answer yet.
            body = json.dumps(
                {
                    "code": "request_timeout",
                    "message": f"the request head did not arrive within {self.head_timeout:g} s "
                    "(REACTQ_REQUEST_TIMEOUT_SECONDS)",
                    "errors": [],
                }
            ).encode()
            self.transport.write(
                b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
                + f"content-length: {len(body)}\r\n".encode()
                + b"connection: close\r\n\r\n"
                + body
            )
        self.transport.close()


def protocol_with_deadline(head_timeout: float) -> type[DeadlineH11Protocol]:
    """``DeadlineH11Protocol`` with its head deadline set (uvicorn takes a class)."""
    return type("GatewayH11Protocol", (DeadlineH11Protocol,), {"head_timeout": float(head_timeout)})


def serve(host: str, port: int, *, insecure: bool = False, log_level: str = "info") -> int:
    """Run the gateway until interrupted; 2 when the bind is refused."""
    import uvicorn

    from reactq.producer.gateway.factory import create_app

    settings = Settings.from_env()
    keys = ApiKeys(settings.api_keys)
    refusal = check_bind(host, keys, insecure)
    if refusal is not None:
        print(f"reactq: error: {refusal}", file=sys.stderr)
        return 2
    if not keys.enabled:
        where = "loopback only" if not insecure else f"{host} WITHOUT AUTH (--insecure)"
        print(
            f"reactq: no API keys configured (REACTQ_API_KEYS): serving on {where}",
            file=sys.stderr,
            flush=True,
        )
    timeout = settings.request_timeout_seconds
    uvicorn.run(
        create_app(settings, insecure=insecure),
        host=host,
        port=port,
        log_level=log_level,
        # uvicorn's loggers propagate to reactq's handler (JSON or text, redacted).
        log_config=uvicorn_log_config(),
        http=protocol_with_deadline(timeout),
        h11_max_incomplete_event_size=MAX_HEAD_BYTES,
        # An idle kept-alive connection is closed after this (or the head deadline).
        timeout_keep_alive=max(1, min(5, round(timeout))),
        # Event streams never end on their own: give them a moment, then close them.
        timeout_graceful_shutdown=3,
    )
    return 0
