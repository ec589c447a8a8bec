"""A PostgreSQL that goes away and comes back, for the outage tests.

``DatabaseProxy`` forwards TCP connections to a real PostgreSQL. ``down()`` closes
its listening socket and resets every connection through it, as a server restart
does: the clients see the driver's own errors (a reset connection mid-query, then
connection refused) until ``up()`` listens again on the same port. Nothing is
invented: asyncpg and SQLAlchemy raise what they raise for a real restart.

It runs on a thread of its own, so worker processes (which reach the database
through its port) and the test's own event loop both see the outage.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit


class DatabaseProxy:
    """A TCP forwarder in front of ``target_url``'s server; ``url`` goes through it."""

    def __init__(self, target_url: str) -> None:
        parts = urlsplit(target_url)
        self._target = (parts.hostname or "127.0.0.1", parts.port or 5432)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        netloc = (
            f"{parts.username}@127.0.0.1:{self.port}"
            if parts.username
            else f"127.0.0.1:{self.port}"
        )
        self.url = urlunsplit(parts._replace(netloc=netloc))
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.StreamWriter] = set()
        self._clients: set[asyncio.StreamWriter] = set()
        self.connections = 0
        """Connections accepted so far (a client that reconnected shows here)."""
        self.turned_away = 0
        """Connections reset at once while down with ``turn_away``."""
        self._turning_away = False

    def start(self) -> DatabaseProxy:
        self._thread.start()
        self.up()
        return self

    def _call(self, coro: object) -> None:
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)  # type: ignore[arg-type]

    def up(self) -> None:
        """Accept connections again (on the same port)."""
        self._turning_away = False
        self._call(self._listen())

    def down(self, *, answers_lost: bool = False, turn_away: bool = False) -> None:
        """Refuse new connections and reset the open ones. ``answers_lost``: cut only
        the clients' side, so a statement the server is running goes on to its end
        (and commits) while its client never hears of it. ``turn_away``: keep
        listening but reset each new connection at once, as a server shutting down
        drops them, and count them (``turned_away``): a test can wait for a client
        to have tried."""
        self._call(self._close(answers_lost))
        if turn_away:
            self._turning_away = True
            self._call(self._listen())

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.down()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    async def _listen(self) -> None:
        if self._server is None:
            self._server = await asyncio.start_server(
                self._serve, "127.0.0.1", self.port, reuse_address=True
            )

    async def _close(self, answers_lost: bool = False) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for writer in list(self._clients if answers_lost else self._pipes):
            sock = writer.get_extra_info("socket")
            with contextlib.suppress(OSError):
                # SO_LINGER 0: a reset, as a killed backend's socket gives.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
        self._clients.clear()
        if not answers_lost:
            self._pipes.clear()
        if server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 2)

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        if self._turning_away:
            self.turned_away += 1
            client_w.transport.abort()
            return
        self.connections += 1
        try:
            server_r, server_w = await asyncio.open_connection(*self._target)
        except OSError:
            client_w.transport.abort()
            return
        self._pipes.update((client_w, server_w))
        self._clients.add(client_w)

        async def pump(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            try:
                while data := await r.read(65536):
                    w.write(data)
                    await w.drain()
            except (OSError, RuntimeError, asyncio.CancelledError):
                pass  # the other side was cut
            finally:
                w.transport.abort()

        await asyncio.gather(pump(client_r, server_w), pump(server_r, client_w))
        self._pipes.discard(client_w)
        self._pipes.discard(server_w)
        self._clients.discard(client_w)


@contextlib.contextmanager
def database_proxy(target_url: str) -> Iterator[DatabaseProxy]:
    """A started ``DatabaseProxy`` in front of ``target_url``, stopped on the way out."""
    proxy = DatabaseProxy(target_url).start()
    try:
        yield proxy
    finally:
        proxy.stop()
