"""The files a turn's tools changed, in Redis (``RedisStateStore``'s part of the
StateStore contract that ``reactq undo`` reads)::

    <ns>:state:files:{<turn_id>}          list    the turn's file actions (JSON)
    <ns>:state:files:{<turn_id>}:undone   string  when they were undone
    <ns>:state:files-of:{<sid>}           set     the session's turns that have some
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Sequence

from redis.asyncio import Redis

from reactq.shared.state.base import FileAction


class RedisFiles:
    """File actions on Redis; mixed into ``RedisStateStore``, whose client it uses."""

    redis: Redis
    namespace: str

    def _file_turns(self, session_id: str) -> str:
        # The turns of a session that have file actions, for delete_session.
        return f"{self.namespace}:state:files-of:{{{session_id}}}"

    def _file_keys(self, turn_id: str) -> tuple[str, str]:
        # One hash tag: the list and its undone mark share a cluster slot.
        base = f"{self.namespace}:state:files:{{{turn_id}}}"
        return base, f"{base}:undone"

    async def record_file_actions(self, actions: Sequence[FileAction]) -> None:
        """Append file actions (one RPUSH per turn); see StateStore.record_file_actions."""
        now = time.time()
        by_turn: dict[str, list[str]] = {}
        for action in actions:
            data = action.model_dump(exclude={"undone_at"})
            data["created_at"] = action.created_at or now
            data["before"] = (
                None if action.before is None else base64.b64encode(action.before).decode()
            )
            by_turn.setdefault(action.turn_id, []).append(json.dumps(data))
        for turn_id, values in by_turn.items():
            await self.redis.sadd(self._file_turns(actions[0].session_id), turn_id)
            await self.redis.rpush(self._file_keys(turn_id)[0], *values)

    async def file_actions(self, turn_id: str) -> list[FileAction]:
        """A turn's file actions, oldest first."""
        listed, undone = self._file_keys(turn_id)
        raw = await self.redis.lrange(listed, 0, -1)
        mark = await self.redis.get(undone) if raw else None
        out = []
        for value in raw:
            data = json.loads(value)
            if data["before"] is not None:
                data["before"] = base64.b64decode(data["before"])
            data["undone_at"] = None if mark is None else float(mark)
            out.append(FileAction.model_validate(data))
        return out

    async def mark_file_actions_undone(self, turn_id: str, undone_at: float) -> bool:
        """Mark a turn's file actions undone, once (SET NX); see StateStore."""
        listed, undone = self._file_keys(turn_id)
        if not await self.redis.exists(listed):
            return False
        return bool(await self.redis.set(undone, repr(undone_at), nx=True))
