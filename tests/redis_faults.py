"""Redis faults injected in-process, at an exact point: a connection that loses the
reply of a script the server has just run, so redis-py's retry runs it again (what a
restart or a pause longer than the socket timeout does, by luck of timing), and a
bus that raises for as long as a test says."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis as redis_sync
from redis.asyncio import ConnectionPool, Redis
from redis.asyncio.connection import Connection
from redis.exceptions import ConnectionError as RedisConnectionError

from reactq.shared.bus import E, Guard
from reactq.shared.bus_redis import RedisEventBus
from reactq.shared.events import BaseEvent
from reactq.shared.keys import Keys
from reactq.shared.redis_client import resilient_options
from tests.conftest import free_port


class ReplyDrops:
    """Which script calls lose their reply: ``arm(matches, times)`` drops the reply
    of the next ``times`` EVALSHA calls whose arguments ``matches`` accepts."""

    def __init__(self) -> None:
        self.left = 0
        self.matches: Callable[[tuple[Any, ...]], bool] = lambda _args: True
        self.dropped = 0

    def arm(self, matches: Callable[[tuple[Any, ...]], bool], times: int = 1) -> None:
        self.matches, self.left = matches, times


class _DroppingConnection(Connection):
    drops: ReplyDrops

    async def send_command(self, *args: Any, **kwargs: Any) -> None:
        self._sent = args
        await super().send_command(*args, **kwargs)

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        reply = await super().read_response(*args, **kwargs)
        sent: tuple[Any, ...] = getattr(self, "_sent", ())
        drops = self.drops
        if drops.left and sent and str(sent[0]).upper() == "EVALSHA" and drops.matches(sent):
            drops.left -= 1
            drops.dropped += 1
            # The server ran the script; its reply is lost with the connection.
            raise RedisConnectionError("injected: connection lost after the script ran")
        return reply


def dropping_client(url: str) -> tuple[Redis, ReplyDrops]:
    """A client with the worker's retry options whose connections drop replies as
    the returned ``ReplyDrops`` says."""
    drops = ReplyDrops()
    connection = type("DroppingConnection", (_DroppingConnection,), {"drops": drops})
    pool = ConnectionPool.from_url(url, connection_class=connection, **resilient_options())
    return Redis.from_pool(pool), drops


def names_key(fragment: str) -> Callable[[tuple[Any, ...]], bool]:
    """An EVALSHA whose keys or arguments include one containing ``fragment``."""
    return lambda args: any(fragment in _text(a) for a in args[3:])


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class FaultyBus(RedisEventBus):
    """A RedisEventBus whose publishes raise what ``fault`` returns for the events
    about to go out (None: publish them), before anything reaches Redis: a bus that
    is away for as long as the test says."""

    def __init__(self, redis: Redis, keys: Keys) -> None:
        super().__init__(redis, keys)
        self.fault: Callable[[Sequence[BaseEvent]], Exception | None] = lambda _events: None
        self.raised = 0

    def _check(self, events: Sequence[BaseEvent]) -> None:
        error = self.fault(events)
        if error is not None:
            self.raised += 1
            raise error

    async def publish(self, event: E) -> E:
        self._check([event])
        return await super().publish(event)

    async def publish_many(self, events: Sequence[E], guard: Guard | None = None) -> list[E] | None:
        self._check(events)
        return await super().publish_many(events, guard)


@contextmanager
def private_redis(workdir: Path) -> Iterator[str]:
    """A redis-server of the test's own, on a free port, without persistence: a test
    may flush it (never the shared 127.0.0.1:6379). Yields its URL."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed: apt-get install redis-server")
    port = free_port()
    args = ["--port", str(port), "--bind", "127.0.0.1", "--dir", str(workdir)]
    proc = subprocess.Popen(
        [binary, *args, "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        deadline = time.monotonic() + 10
        while not _answers(url):
            if time.monotonic() > deadline or proc.poll() is not None:
                raise AssertionError(f"the private redis-server on {port} did not come up")
            time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def _answers(url: str) -> bool:
    try:
        client = redis_sync.Redis.from_url(url, socket_connect_timeout=0.5)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except redis_sync.RedisError:
        return False
