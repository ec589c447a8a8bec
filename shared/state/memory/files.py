"""The files a turn's tools changed, in a memory store (``MemoryStateStore``'s part of
the StateStore contract that ``reactq undo`` reads)."""

from __future__ import annotations

import time
from collections.abc import Sequence

from reactq.shared.state.base import FileAction


class MemoryFiles:
    """File actions in a dict; mixed into ``MemoryStateStore``."""

    _file_actions: dict[str, list[FileAction]]

    async def record_file_actions(self, actions: Sequence[FileAction]) -> None:
        """Append file actions; see StateStore.record_file_actions."""
        now = time.time()
        for action in actions:
            stamped = action if action.created_at else action.model_copy(update={"created_at": now})
            self._file_actions.setdefault(action.turn_id, []).append(stamped)

    async def file_actions(self, turn_id: str) -> list[FileAction]:
        """A turn's file actions, oldest first."""
        return list(self._file_actions.get(turn_id, []))

    async def mark_file_actions_undone(self, turn_id: str, undone_at: float) -> bool:
        """Mark a turn's file actions undone, once; see StateStore."""
        actions = self._file_actions.get(turn_id)
        if not actions or actions[0].undone_at is not None:
            return False
        self._file_actions[turn_id] = [
            a.model_copy(update={"undone_at": undone_at}) for a in actions
        ]
        return True
