"""A running turn's steps in a memory store (``MemoryStateStore``'s StepStore part)."""

from __future__ import annotations

import time

from reactq.shared.state.base import TurnCheckpoint, TurnRecord
from reactq.shared.state.common import committed_twice, stale
from reactq.shared.state.memory.sessions import Session


class MemorySteps:
    """The StepStore contract in a dict; mixed into ``MemoryStateStore``, whose sessions
    and turns it checks."""

    _turns: dict[str, TurnRecord]
    _checkpoints: dict[tuple[str, str], TurnCheckpoint]

    def _require(self, session_id: str) -> Session:
        raise NotImplementedError  # pragma: no cover - MemoryStateStore's

    def _evict(self, *, force: bool = False) -> None:
        raise NotImplementedError  # pragma: no cover - MemoryStateStore's

    async def checkpoint_step(self, checkpoint: TurnCheckpoint, fence: int | None = None) -> None:
        """Store a running turn's completed steps; see StateStore.checkpoint_step."""
        session_id, turn_id = checkpoint.session_id, checkpoint.turn_id
        session = self._require(session_id)
        if fence is not None and session.fence > fence:
            raise stale(session_id, session.fence, fence)
        if turn_id in self._turns:
            raise committed_twice(session_id, turn_id)
        if fence is not None:
            session.fence = fence
        if not checkpoint.updated_at:
            checkpoint = checkpoint.model_copy(update={"updated_at": time.time()})
        self._checkpoints[(session_id, turn_id)] = checkpoint

    async def get_checkpoint(self, session_id: str, turn_id: str) -> TurnCheckpoint | None:
        """The turn's last checkpoint, or None."""
        self._evict()
        return self._checkpoints.get((session_id, turn_id))

    async def discard_checkpoint(self, session_id: str, turn_id: str) -> None:
        """Forget the turn's checkpoint. Idempotent."""
        self._checkpoints.pop((session_id, turn_id), None)
