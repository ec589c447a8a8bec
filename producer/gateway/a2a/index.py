"""The index of the tasks A2A started, per tenant, newest first: what ``ListTasks``
pages through (a cursor is the submit time of the last task of the previous page).

The pool keeps no list of its turns by caller, so the surface keeps its own, trimmed to
``MAX_TASKS`` per tenant."""

from __future__ import annotations

import time
from typing import cast

from a2a.utils.errors import InvalidParamsError

from reactq.producer.gateway.security import KeyScope
from reactq.producer.gateway.service import Gateway

__all__ = ["MAX_TASKS", "TaskIndex"]

MAX_TASKS = 10_000
"""The most tasks a tenant's index keeps (the oldest go first)."""


class TaskIndex:
    """The A2A tasks of a gateway's tenants, in Redis (``Keys.a2a_tasks``)."""

    def __init__(self, gateway: Gateway) -> None:
        self.redis = gateway.producer.redis
        self.keys = gateway.producer.keys

    def _key(self, scope: KeyScope | None) -> str:
        return self.keys.a2a_tasks(scope.prefix or "" if scope is not None else "")

    async def add(self, scope: KeyScope | None, turn_id: str) -> None:
        """Index a task A2A just started."""
        key = self._key(scope)
        await self.redis.zadd(key, {turn_id: time.time()})
        await self.redis.zremrangebyrank(key, 0, -MAX_TASKS - 1)

    async def page(
        self, scope: KeyScope | None, cursor: str | None, size: int
    ) -> tuple[list[str], str | None]:
        """Up to ``size`` task ids older than ``cursor`` (None: the newest), and the
        cursor of the next page (None: no more)."""
        top = "+inf"
        if cursor is not None:
            try:
                top = f"({float(cursor)!r}"
            except ValueError:
                raise InvalidParamsError("pageToken is not one this server gave") from None
        found = await self.redis.zrevrangebyscore(
            self._key(scope), top, "-inf", start=0, num=size, withscores=True
        )
        # withscores=True: (member, score) pairs, whatever redis-py's overloads say.
        pairs = cast(list[tuple[bytes | str, float]], found)
        ids = [m.decode() if isinstance(m, bytes) else str(m) for m, _ in pairs]
        following = repr(pairs[-1][1]) if len(pairs) == size else None
        return ids, following
