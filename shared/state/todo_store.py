"""A session's todo list: the plan an agent works against, kept in the state store so
whichever worker runs the session's next turn reads the same list.

The list is one value per session, replaced whole (``set_todos``): the tools that
edit it (``reactq.bundles.todos``) read it, apply the model's changes and write it
back, and a session's turns never run at once, so nothing interleaves. It is saved
when the tool runs, not with the turn's commit, fenced by the session's lease as the
commit is (a worker that lost the lease writes nothing), and goes with the session.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from enum import StrEnum
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "MAX_TODOS",
    "MAX_TODO_TEXT",
    "TodoItem",
    "TodoStatus",
    "TodoStore",
    "dump_todos",
    "load_todos",
]

MAX_TODOS = 100
"""The most items a list holds."""
MAX_TODO_TEXT = 500
"""The longest item text, in characters."""


class TodoStatus(StrEnum):
    """Where an item stands."""

    PENDING = "pending"
    """Not started."""
    IN_PROGRESS = "in_progress"
    """Being worked on."""
    DONE = "done"
    """Finished."""


class TodoItem(BaseModel):
    """One item of a session's todo list."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._:-]+$")
    """Its id, unique in the list (the model names items by it)."""
    text: str = Field(min_length=1, max_length=MAX_TODO_TEXT)
    """What to do."""
    status: TodoStatus = TodoStatus.PENDING
    """pending, in_progress or done."""


@runtime_checkable
class TodoStore(Protocol):
    """Where sessions' todo lists are kept (every StateStore is one)."""

    async def get_todos(self, session_id: str) -> list[TodoItem]:
        """The session's list, in order ([] when it has none)."""
        ...

    async def set_todos(
        self, session_id: str, items: Sequence[TodoItem], fence: int | None = None
    ) -> None:
        """Replace the session's list (an empty one removes it).

        With ``fence`` (the writer's lease token), StaleLeaseError and nothing written
        when the store has recorded a newer token for the session: a worker that lost
        the session's lease no longer writes its list, as it no longer commits. The
        token is checked, not recorded (the holder's ``begin_turn`` recorded it); a
        session the store does not have yet has nothing to fence.
        """
        ...


def dump_todos(items: Sequence[TodoItem]) -> str:
    """A list as the stored JSON text."""
    return json.dumps([item.model_dump(mode="json") for item in items], ensure_ascii=False)


def load_todos(raw: str | bytes | None) -> list[TodoItem]:
    """``dump_todos`` read back ([] for nothing stored)."""
    if not raw:
        return []
    return [TodoItem.model_validate(item) for item in json.loads(raw)]
