"""Redis faults injected in-process, at an exact point: a connection that loses the
reply of a script the server has just run, so redis-py's retry runs it again (what a
restart or a pause longer than the socket timeout does, by luck of timing)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from redis.asyncio import ConnectionPool, Redis
from redis.asyncio.connection import Connection
from redis.exceptions import ConnectionError as RedisConnectionError

from reactq.shared.redis_client import resilient_options


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
