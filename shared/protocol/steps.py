"""A running turn's checkpointed steps, kept in Redis beside its running slot.

The worker pool checkpoints every completed step of a turn (``AgentRunner``'s
``steps``): the model's reply before its tools run, and the step once their
results are in. Those writes are in-flight state, like the running slot and the
lease they belong to, so they live with them: a write is fenced by the lease in
the same call (a holder that lost the lease writes nothing and gets
StaleLeaseError), and the turn's end (``queue_finish.lua``, a cancel of a parked
turn) drops them in the same call as it clears the running slot. Nothing of them
enters the conversation: the commit (``StateStore.commit_turn``) writes the
turn's messages. Redis keeps them as long as it keeps the queue itself, so a
worker's death loses nothing it would not lose anyway (docs/architecture.md,
"Session protocol").

A step's events go out with its checkpoint, in the same call
(``TurnEmitter.checkpoint``; ``guard`` makes the write a guard of the bus's
``publish_many``): the reply's with its tool calls' ``action`` events, the
step's with its results.

``TurnSteps`` has the checkpoint methods of ``StateStore`` (``StepStore``), so a
runner takes either: the embedded mode keeps steps in its store.
"""

from __future__ import annotations

from redis.asyncio import Redis

from reactq.shared.bus import CheckpointGuard
from reactq.shared.errors import StaleLeaseError
from reactq.shared.keys import Keys
from reactq.shared.redis_client import lua_source
from reactq.shared.state.base import TurnCheckpoint

_SAVE = lua_source(__name__, "lease_token", "fenced_hset", "steps_save")


class TurnSteps:
    """The checkpointed steps of a namespace's running turns, in Redis.

    ``ttl_seconds`` bounds how long steps outlive a turn that never ends (they are
    dropped when it ends): longer than a parked turn may wait for decisions.
    """

    def __init__(self, redis: Redis, keys: Keys, ttl_seconds: int) -> None:
        self.redis = redis
        self.keys = keys
        self.ttl_seconds = ttl_seconds
        self._save = redis.register_script(_SAVE)

    async def checkpoint_step(self, checkpoint: TurnCheckpoint, fence: int | None = None) -> None:
        """Store the turn's steps, replacing its previous checkpoint; StaleLeaseError
        (nothing written) when ``fence`` no longer holds the session's lease."""
        sid = checkpoint.session_id
        stored = await self._save(
            keys=[self.keys.steps(sid), self.keys.lease(sid)],
            args=[
                "" if fence is None else str(fence),
                checkpoint.turn_id,
                checkpoint.model_dump_json(),
                self.ttl_seconds,
            ],
        )
        if not stored:
            raise StaleLeaseError(
                f"not checkpointing turn {checkpoint.turn_id}: the lease of {sid} moved on",
                session_id=sid,
                turn_id=checkpoint.turn_id,
            )

    def guard(self, checkpoint: TurnCheckpoint, fence: int | None = None) -> CheckpointGuard:
        """The checkpoint write as a guard of ``RedisEventBus.publish_many``: stored in
        the call that publishes the events that go with it, fenced the same way."""
        return CheckpointGuard(
            fence, checkpoint.turn_id, checkpoint.model_dump_json(), self.ttl_seconds
        )

    async def get_checkpoint(self, session_id: str, turn_id: str) -> TurnCheckpoint | None:
        """The turn's last checkpoint, or None."""
        raw = await self.redis.hget(self.keys.steps(session_id), turn_id)
        return None if raw is None else TurnCheckpoint.model_validate_json(raw)

    async def discard_checkpoint(self, session_id: str, turn_id: str) -> None:
        """Forget the turn's steps. Idempotent."""
        await self.redis.hdel(self.keys.steps(session_id), turn_id)
