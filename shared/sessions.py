"""The session queue: per-session FIFO of turns, the running slot, turn statuses.

Each operation is one Lua call on keys that share the session's hash tag, so a
submit and a claim racing on one session see a consistent state.

The running slot holds ``<attempt>|<turn_id>|<TurnRequest JSON>`` from the moment
a worker claims a turn until it finishes it. A slot found occupied by the next
lease holder means its previous holder died mid-turn: the turn is handed out
again with its attempt number increased.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from shared.keys import Keys
from shared.turns import MultitaskStrategy, TurnRequest, TurnStatus

_SUBMIT = """
local meta, pending, running, turns = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local agent, payload, turn_id, strategy, ttl = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local current = redis.call('HGET', meta, 'agent')
if current and current ~= agent then
  return {'agent_mismatch', current}
end
local busy = redis.call('EXISTS', running) == 1 or redis.call('LLEN', pending) > 0
if strategy == 'reject' and busy then
  redis.call('HSET', turns, turn_id, 'rejected')
  redis.call('EXPIRE', turns, ttl)
  return {'rejected', ''}
end
redis.call('HSET', meta, 'agent', agent)
redis.call('EXPIRE', meta, ttl)
local position = redis.call('RPUSH', pending, payload)
redis.call('HSET', turns, turn_id, 'queued')
redis.call('EXPIRE', turns, ttl)
return {'queued', tostring(position)}
"""

_CLAIM = """
local running, pending, turns = KEYS[1], KEYS[2], KEYS[3]
local current = redis.call('GET', running)
if current then
  local sep = string.find(current, '|', 1, true)
  local attempt = tonumber(string.sub(current, 1, sep - 1)) + 1
  local rest = string.sub(current, sep + 1)
  redis.call('SET', running, attempt .. '|' .. rest)
  return {attempt, rest}
end
local nxt = redis.call('LPOP', pending)
if not nxt then
  return nil
end
-- a malformed payload still leaves pending, so it can be reported and the queue goes on
local ok, decoded = pcall(cjson.decode, nxt)
local turn_id = ok and type(decoded) == 'table' and decoded['turn_id'] or ''
if type(turn_id) ~= 'string' then turn_id = '' end
local rest = turn_id .. '|' .. nxt
redis.call('SET', running, '1|' .. rest)
if turn_id ~= '' then redis.call('HSET', turns, turn_id, 'running') end
return {1, rest}
"""


_FINISH = """
local running, turns = KEYS[1], KEYS[2]
local turn_id, status, ttl = ARGV[1], ARGV[2], ARGV[3]
local current = redis.call('GET', running)
if current then
  local sep = string.find(current, '|', 1, true)
  local rest = string.sub(current, sep + 1)
  if string.sub(rest, 1, string.len(turn_id) + 1) == turn_id .. '|' then
    redis.call('DEL', running)
  end
end
if turn_id ~= '' then
  redis.call('HSET', turns, turn_id, status)
  redis.call('EXPIRE', turns, ttl)
end
return 1
"""


@dataclass(frozen=True)
class SubmitOutcome:
    """What the session queue did with a submitted turn."""

    status: str
    """``queued``, ``rejected`` or ``agent_mismatch``."""
    detail: str = ""
    """The queue position when queued; the session's agent on a mismatch."""


@dataclass(frozen=True)
class ClaimedTurn:
    """A turn taken into the running slot."""

    attempt: int
    """1 for a first run; more when an earlier holder died mid-turn."""
    turn_id: str
    """The turn id ('' when the payload could not be read)."""
    payload: str
    """The TurnRequest JSON as submitted (possibly malformed)."""

    def parse(self) -> TurnRequest:
        """The TurnRequest; raises on a malformed payload."""
        return TurnRequest.parse(self.payload)


class SessionQueue:
    """Redis operations of the session protocol (DESIGN.md steps 1, 2 and 4)."""

    def __init__(self, redis: Redis, keys: Keys, meta_ttl_seconds: int = 30 * 86400) -> None:
        self.redis = redis
        self.keys = keys
        self.meta_ttl = meta_ttl_seconds
        self._submit = redis.register_script(_SUBMIT)
        self._claim = redis.register_script(_CLAIM)
        self._finish = redis.register_script(_FINISH)

    async def submit(self, turn: TurnRequest) -> SubmitOutcome:
        """Apply the strategy and push the turn, atomically."""
        k, sid = self.keys, turn.session_id
        strategy = "reject" if turn.strategy == MultitaskStrategy.REJECT else "enqueue"
        result: list[Any] = await self._submit(
            keys=[k.meta(sid), k.pending(sid), k.running(sid), k.turns(sid)],
            args=[turn.agent, turn.model_dump_json(), turn.turn_id, strategy, self.meta_ttl],
        )
        status, detail = (_text(x) for x in result)
        if status != "agent_mismatch":
            await self.redis.set(k.turn_index(turn.turn_id), sid, ex=self.meta_ttl)
        return SubmitOutcome(status, detail)

    async def claim_next(self, session_id: str) -> ClaimedTurn | None:
        """Move the next turn into the running slot (or re-issue one left there)."""
        k = self.keys
        result = await self._claim(
            keys=[k.running(session_id), k.pending(session_id), k.turns(session_id)]
        )
        if not result:
            return None
        attempt, rest = int(result[0]), _text(result[1])
        turn_id, _, payload = rest.partition("|")
        return ClaimedTurn(attempt, turn_id, payload)

    async def finish(self, session_id: str, turn_id: str, status: TurnStatus) -> None:
        """Clear the running slot (if it still holds this turn) and record the status."""
        k = self.keys
        await self._finish(
            keys=[k.running(session_id), k.turns(session_id)],
            args=[turn_id, str(status), self.meta_ttl],
        )

    async def pending_count(self, session_id: str) -> int:
        """How many turns wait behind the running one."""
        return int(await self.redis.llen(self.keys.pending(session_id)))

    async def has_work(self, session_id: str) -> bool:
        """True when a turn is pending or left in the running slot."""
        k = self.keys
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.llen(k.pending(session_id))
            pipe.exists(k.running(session_id))
            pending, running = await pipe.execute()
        return bool(pending) or bool(running)

    async def turn_status(self, turn_id: str) -> tuple[str, TurnStatus] | None:
        """(session_id, status) of a recent turn, or None if unknown."""
        sid = await self.redis.get(self.keys.turn_index(turn_id))
        if sid is None:
            return None
        session_id = _text(sid)
        raw = await self.redis.hget(self.keys.turns(session_id), turn_id)
        if raw is None:
            return None
        return session_id, TurnStatus(_text(raw))

    async def register_agents(self, names: list[str], worker: str) -> None:
        """Announce that ``worker`` hosts these agents (producers check this)."""
        stamp = json.dumps({"worker": worker, "ts": round(time.time(), 3), "agents": names})
        async with self.redis.pipeline(transaction=False) as pipe:
            if names:
                pipe.hset(self.keys.agents, mapping=dict.fromkeys(names, stamp))
            pipe.hset(self.keys.workers, worker, stamp)
            await pipe.execute()

    async def forget_worker(self, worker: str) -> None:
        """Remove a stopped worker from the worker registry (its agents stay known)."""
        await self.redis.hdel(self.keys.workers, worker)

    async def agent_known(self, name: str) -> bool:
        """True if some worker has announced the agent."""
        return bool(await self.redis.hexists(self.keys.agents, name))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
