"""Sessions' todo lists in Redis (``RedisStateStore``): one string per session, in the
session's hash tag beside its state::

    <ns>:s:{<sid>}:state:todos    string  the items as JSON
"""

from __future__ import annotations

from collections.abc import Sequence

from redis.asyncio import Redis
from redis.commands.core import AsyncScript

from reactq.shared.redis_client import lua_source
from reactq.shared.state.common import stale
from reactq.shared.state.todo_store import TodoItem, dump_todos, load_todos

_SET = lua_source(__name__, "state_todos_set")


class RedisTodos:
    """The TodoStore contract on Redis; mixed into ``RedisStateStore``."""

    redis: Redis
    namespace: str
    _set_todos: AsyncScript

    def _todos_key(self, session_id: str) -> str:
        return f"{self.namespace}:s:{{{session_id}}}:state:todos"

    async def get_todos(self, session_id: str) -> list[TodoItem]:
        """The session's list; see TodoStore."""
        return load_todos(await self.redis.get(self._todos_key(session_id)))

    async def set_todos(
        self, session_id: str, items: Sequence[TodoItem], fence: int | None = None
    ) -> None:
        """Replace the session's list (a delete for an empty one), the fence checked in
        the same script; see TodoStore."""
        if not hasattr(self, "_set_todos"):
            self._set_todos = self.redis.register_script(_SET)
        state = f"{self.namespace}:s:{{{session_id}}}:state"
        reply = await self._set_todos(
            keys=[state, self._todos_key(session_id)],
            args=["" if fence is None else fence, dump_todos(items) if items else ""],
        )
        if fence is not None and reply is not None and int(reply) > fence:
            raise stale(session_id, int(reply), fence)
