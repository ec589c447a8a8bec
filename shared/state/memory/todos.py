"""Sessions' todo lists in a dict (``MemoryStateStore``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from reactq.shared.state.common import stale
from reactq.shared.state.todo_store import TodoItem


class MemoryTodos:
    """The TodoStore contract in a dict; mixed into ``MemoryStateStore``."""

    _todos: dict[str, list[TodoItem]]

    def _touch(self, session_id: str) -> Any:
        raise NotImplementedError  # pragma: no cover - MemoryStateStore's

    def _todo_lists(self) -> dict[str, list[TodoItem]]:
        if not hasattr(self, "_todos"):
            self._todos = {}
        return self._todos

    async def get_todos(self, session_id: str) -> list[TodoItem]:
        """The session's list; see TodoStore."""
        return list(self._todo_lists().get(session_id, []))

    async def set_todos(
        self, session_id: str, items: Sequence[TodoItem], fence: int | None = None
    ) -> None:
        """Replace the session's list, fenced; see TodoStore."""
        session = self._touch(session_id)
        if fence is not None and session is not None and session.fence > fence:
            raise stale(session_id, session.fence, fence)
        if items:
            self._todo_lists()[session_id] = list(items)
        else:
            self._todo_lists().pop(session_id, None)
