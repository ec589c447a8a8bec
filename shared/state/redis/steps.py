"""A running turn's steps in Redis (``RedisStateStore``'s StepStore part): a hash in
the session's hash tag, a field a turn, written by ``state_checkpoint.lua`` under the
fence::

    <ns>:s:{<sid>}:state:steps      hash  turn_id -> checkpoint JSON
"""

from __future__ import annotations

import json
import time

from redis.asyncio import Redis
from redis.commands.core import AsyncScript

from reactq.shared.redis_client import lua_source
from reactq.shared.state.base import TurnCheckpoint
from reactq.shared.state.common import committed_twice, dump_steps, load_steps, stale
from reactq.shared.state.redis import records

CHECKPOINT = lua_source(__name__, "state_checkpoint")
"""The script that writes a checkpoint (the store registers it)."""


class RedisSteps:
    """The StepStore contract on Redis; mixed into ``RedisStateStore``, whose client,
    keys and registered script it uses."""

    redis: Redis
    _checkpoint: AsyncScript

    def _keys(self, session_id: str) -> list[str]:
        raise NotImplementedError  # pragma: no cover - RedisStateStore's

    async def checkpoint_step(self, checkpoint: TurnCheckpoint, fence: int | None = None) -> None:
        """Store a running turn's completed steps; see StateStore.checkpoint_step."""
        session_id, turn_id = checkpoint.session_id, checkpoint.turn_id
        data = {
            "v": records.RECORD_VERSION,
            "step": checkpoint.step,
            "attempt": checkpoint.attempt,
            "branch": checkpoint.branch_id,
            "updated_at": checkpoint.updated_at or time.time(),
            "messages": dump_steps(checkpoint.messages),
        }
        keys = self._keys(session_id)
        reply = records.texts(
            await self._checkpoint(
                keys=[keys[0], keys[3], keys[4]],
                args=["" if fence is None else fence, turn_id, json.dumps(data)],
            )
        )
        if reply[0] == "stale" and fence is not None:
            raise stale(session_id, int(reply[1]), fence)
        if reply[0] == "committed":
            raise committed_twice(session_id, turn_id)
        records.raise_for(session_id, reply)

    async def get_checkpoint(self, session_id: str, turn_id: str) -> TurnCheckpoint | None:
        """The turn's last checkpoint, or None."""
        raw = await self.redis.hget(self._keys(session_id)[4], turn_id)
        if raw is None:
            return None
        data = records.load(raw, "turn checkpoint")
        return TurnCheckpoint(
            session_id=session_id,
            turn_id=turn_id,
            step=data["step"],
            messages=load_steps(data["messages"]),
            branch_id=data["branch"],
            attempt=data["attempt"],
            updated_at=data["updated_at"],
        )

    async def discard_checkpoint(self, session_id: str, turn_id: str) -> None:
        """Forget the turn's checkpoint. Idempotent."""
        await self.redis.hdel(self._keys(session_id)[4], turn_id)
