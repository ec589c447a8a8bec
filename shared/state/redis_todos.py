"""Sessions' todo lists in Redis (``RedisStateStore``): one string per session, in the
session's hash tag beside its state::

    <ns>:s:{<sid>}:state:todos    string  the items as JSON
"""

from __future__ import annotations

from collections.abc import Sequence

from redis.asyncio import Redis

from reactq.shared.state.todos import TodoItem, dump_todos, load_todos


class RedisTodos:
    """The TodoStore contract on Redis; mixed into ``RedisStateStore``."""

    redis: Redis
    namespace: str

    def _todos_key(self, session_id: str) -> str:
        return f"{self.namespace}:s:{{{session_id}}}:state:todos"

    async def get_todos(self, session_id: str) -> list[TodoItem]:
        """The session's list; see TodoStore."""
        return load_todos(await self.redis.get(self._todos_key(session_id)))

    async def set_todos(self, session_id: str, items: Sequence[TodoItem]) -> None:
        """Replace the session's list (a delete for an empty one)."""
        if items:
            await self.redis.set(self._todos_key(session_id), dump_todos(items))
        else:
            await self.redis.delete(self._todos_key(session_id))
