"""The session queue: per-session FIFO of turns, the running slot, turn statuses.

Each operation is one Lua call on the session's keys (they share its hash tag),
so a submit, a claim and a cancel racing on one session see one consistent order.

The running slot holds ``<attempt>|<lost>|<turn_id>|<TurnRequest JSON>`` from the
moment a worker claims a turn until it finishes it. ``attempt`` counts runs;
``lost`` counts runs that died with their worker. A slot found occupied by the
next lease holder means its previous holder died mid-turn: the turn is handed out
again as attempt n+1 with ``lost`` increased. A worker that gives a turn back on
shutdown lowers ``lost`` first, so that run is not charged.

Every session with work has a deadline in ``keys.lease_deadlines`` (set at
submit, pushed on by lease renewals, removed on release): the reaper re-dispatches
sessions whose deadline passed, which covers both a dead lease holder and a drain
task lost with its worker.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from reactq.shared.keys import Keys
from reactq.shared.redis_client import NOW_MS_LUA, text
from reactq.shared.turns import MultitaskStrategy, TurnRequest, TurnStatus

# Split "<attempt>|<lost>|<turn_id>|<payload>".
_PARSE_RUNNING = """
local function parse_running(value)
  local a, l, rest = string.match(value, '^(%d+)|(-?%d+)|(.*)$')
  local sep = string.find(rest, '|', 1, true)
  return tonumber(a), tonumber(l), string.sub(rest, 1, sep - 1), string.sub(rest, sep + 1)
end
"""

# KEYS: meta, pending, running, turns, deadlines, cancel_prefix
# ARGV: agent, payload, turn_id, strategy, ttl_s, session_id, grace_ms, cancel_ttl_s
# Returns {status, detail, cancelled_running, cancelled_pending...}
_SUBMIT = (
    NOW_MS_LUA
    + _PARSE_RUNNING
    + """
local meta, pending, running, turns, deadlines = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local agent, payload, turn_id, strategy = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local ttl, sid = tonumber(ARGV[5]), ARGV[6]
local current = redis.call('HGET', meta, 'agent')
if current and current ~= agent then
  return {'agent_mismatch', current, ''}
end
local run = redis.call('GET', running)
local busy = run or redis.call('LLEN', pending) > 0
if strategy == 'reject' and busy then
  redis.call('HSET', turns, turn_id, 'rejected')
  redis.call('EXPIRE', turns, ttl)
  return {'rejected', '', ''}
end
local out = {'queued', '', ''}
if strategy == 'interrupt' or strategy == 'rollback' then
  -- The new message supersedes what is in flight: stop the running turn (the
  -- worker reads the mode from the flag) and drop the turns still waiting.
  if run then
    local _, _, running_id = parse_running(run)
    if running_id ~= '' then
      redis.call('SET', KEYS[6] .. running_id, strategy, 'EX', tonumber(ARGV[8]))
      out[3] = running_id
    end
  end
  local waiting = redis.call('LRANGE', pending, 0, -1)
  redis.call('DEL', pending)
  for _, item in ipairs(waiting) do
    local ok, decoded = pcall(cjson.decode, item)
    if ok and type(decoded) == 'table' and type(decoded['turn_id']) == 'string' then
      redis.call('HSET', turns, decoded['turn_id'], 'cancelled')
      table.insert(out, decoded['turn_id'])
    end
  end
end
redis.call('HSET', meta, 'agent', agent)
redis.call('EXPIRE', meta, ttl)
out[2] = tostring(redis.call('RPUSH', pending, payload))
redis.call('HSET', turns, turn_id, 'queued')
redis.call('EXPIRE', turns, ttl)
redis.call('ZADD', deadlines, 'NX', now + tonumber(ARGV[7]), sid)
return out
"""
)

# KEYS: running, pending, turns
_CLAIM = (
    _PARSE_RUNNING
    + """
local running, pending, turns = KEYS[1], KEYS[2], KEYS[3]
local current = redis.call('GET', running)
if current then
  local attempt, lost, turn_id, payload = parse_running(current)
  attempt, lost = attempt + 1, lost + 1
  redis.call('SET', running, attempt .. '|' .. lost .. '|' .. turn_id .. '|' .. payload)
  return {attempt, lost, turn_id, payload}
end
local nxt = redis.call('LPOP', pending)
if not nxt then
  return nil
end
-- a malformed payload still leaves pending, so it can be reported and the queue goes on
local ok, decoded = pcall(cjson.decode, nxt)
local turn_id = ok and type(decoded) == 'table' and decoded['turn_id'] or ''
if type(turn_id) ~= 'string' or string.find(turn_id, '|', 1, true) then turn_id = '' end
redis.call('SET', running, '1|0|' .. turn_id .. '|' .. nxt)
if turn_id ~= '' then redis.call('HSET', turns, turn_id, 'running') end
return {1, 0, turn_id, nxt}
"""
)

# KEYS: running, turns; ARGV: turn_id, status, ttl_s
_FINISH = (
    _PARSE_RUNNING
    + """
local current = redis.call('GET', KEYS[1])
if current then
  local _, _, turn_id = parse_running(current)
  if turn_id == ARGV[1] then redis.call('DEL', KEYS[1]) end
end
if ARGV[1] ~= '' then
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
  redis.call('EXPIRE', KEYS[2], ARGV[3])
end
return 1
"""
)

# KEYS: running; ARGV: turn_id. Give a turn back without charging the run.
_GIVE_BACK = (
    _PARSE_RUNNING
    + """
local current = redis.call('GET', KEYS[1])
if not current then return 0 end
local attempt, lost, turn_id, payload = parse_running(current)
if turn_id ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], attempt .. '|' .. (lost - 1) .. '|' .. turn_id .. '|' .. payload)
return 1
"""
)

# KEYS: pending, running, turns, cancel_flag; ARGV: turn_id, ttl_s
_CANCEL = (
    _PARSE_RUNNING
    + """
local items = redis.call('LRANGE', KEYS[1], 0, -1)
for _, item in ipairs(items) do
  local ok, decoded = pcall(cjson.decode, item)
  if ok and type(decoded) == 'table' and decoded['turn_id'] == ARGV[1] then
    redis.call('LREM', KEYS[1], 1, item)
    redis.call('HSET', KEYS[3], ARGV[1], 'cancelled')
    return 'dequeued'
  end
end
local current = redis.call('GET', KEYS[2])
if current then
  local _, _, turn_id = parse_running(current)
  if turn_id == ARGV[1] then
    redis.call('SET', KEYS[4], 'cancel', 'EX', tonumber(ARGV[2]))
    return 'running'
  end
end
local status = redis.call('HGET', KEYS[3], ARGV[1])
if status then return 'finished:' .. status end
return 'unknown'
"""
)

# KEYS: deadlines; ARGV: limit, retry_ms. Sessions whose deadline passed, each
# pushed one retry period on so one reaper (not all of them) re-dispatches it.
_REAP = (
    NOW_MS_LUA
    + """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
for _, sid in ipairs(due) do
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), sid)
end
return due
"""
)


# KEYS: deadlines; ARGV: delay_ms, session_id. Never pushes an earlier deadline later.
_WATCH = (
    NOW_MS_LUA
    + """
redis.call('ZADD', KEYS[1], 'LT', now + tonumber(ARGV[1]), ARGV[2])
redis.call('ZADD', KEYS[1], 'NX', now + tonumber(ARGV[1]), ARGV[2])
return 1
"""
)


@dataclass(frozen=True)
class SubmitOutcome:
    """What the session queue did with a submitted turn."""

    status: str
    """``queued``, ``rejected`` or ``agent_mismatch``."""
    detail: str = ""
    """The queue position when queued; the session's agent on a mismatch."""
    stopped_running: str = ""
    """The running turn an interrupt/rollback asked to stop ('' if none)."""
    dropped_pending: tuple[str, ...] = ()
    """Waiting turns an interrupt/rollback cancelled."""


@dataclass(frozen=True)
class ClaimedTurn:
    """A turn taken into the running slot."""

    attempt: int
    """1 for a first run; n+1 for each time it is handed out again."""
    lost: int
    """How many earlier runs died with their worker (charged against max_attempts)."""
    turn_id: str
    """The turn id ('' when the payload could not be read)."""
    payload: str
    """The TurnRequest JSON as submitted (possibly malformed)."""

    def parse(self) -> TurnRequest:
        """The TurnRequest; raises on a malformed payload."""
        return TurnRequest.parse(self.payload)


class SessionQueue:
    """Redis operations of the session protocol (DESIGN.md steps 1, 2, 4 and 5)."""

    def __init__(
        self,
        redis: Redis,
        keys: Keys,
        meta_ttl_seconds: int = 30 * 86400,
        *,
        dispatch_grace_seconds: float = 30.0,
        cancel_ttl_seconds: int = 3600,
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.meta_ttl = meta_ttl_seconds
        self.grace_ms = int(dispatch_grace_seconds * 1000)
        self.cancel_ttl = cancel_ttl_seconds
        self._submit = redis.register_script(_SUBMIT)
        self._claim = redis.register_script(_CLAIM)
        self._finish = redis.register_script(_FINISH)
        self._give_back = redis.register_script(_GIVE_BACK)
        self._cancel = redis.register_script(_CANCEL)
        self._reap = redis.register_script(_REAP)
        self._watch = redis.register_script(_WATCH)

    async def submit(self, turn: TurnRequest) -> SubmitOutcome:
        """Apply the multitask strategy and push the turn, atomically."""
        k, sid = self.keys, turn.session_id
        result: list[Any] = await self._submit(
            keys=[
                k.meta(sid),
                k.pending(sid),
                k.running(sid),
                k.turns(sid),
                k.lease_deadlines,
                k.cancel_prefix(sid),
            ],
            args=[
                turn.agent,
                turn.model_dump_json(),
                turn.turn_id,
                MultitaskStrategy(turn.strategy).value,
                self.meta_ttl,
                sid,
                self.grace_ms,
                self.cancel_ttl,
            ],
        )
        status, detail, stopped, *dropped = (text(x) for x in result)
        if status != "agent_mismatch":
            await self.redis.set(k.turn_index(turn.turn_id), sid, ex=self.meta_ttl)
        return SubmitOutcome(status, detail, stopped, tuple(dropped))

    async def claim_next(self, session_id: str) -> ClaimedTurn | None:
        """Move the next turn into the running slot (or re-issue one left there)."""
        k = self.keys
        result = await self._claim(
            keys=[k.running(session_id), k.pending(session_id), k.turns(session_id)]
        )
        if not result:
            return None
        return ClaimedTurn(int(result[0]), int(result[1]), text(result[2]), text(result[3]))

    async def finish(self, session_id: str, turn_id: str, status: TurnStatus) -> None:
        """Clear the running slot (if it still holds this turn) and record the status."""
        k = self.keys
        await self._finish(
            keys=[k.running(session_id), k.turns(session_id)],
            args=[turn_id, str(status), self.meta_ttl],
        )

    async def set_status(self, session_id: str, turn_id: str, status: TurnStatus) -> None:
        """Record a turn's status (before its final is published, so that a reader who
        saw the final never reads an older status)."""
        key = self.keys.turns(session_id)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hset(key, turn_id, str(status))
            pipe.expire(key, self.meta_ttl)
            await pipe.execute()

    async def give_back(self, session_id: str, turn_id: str) -> bool:
        """Leave the turn for another worker without charging this run (shutdown)."""
        return bool(await self._give_back(keys=[self.keys.running(session_id)], args=[turn_id]))

    async def cancel(self, session_id: str, turn_id: str) -> str:
        """Cancel a turn: ``dequeued``, ``running`` (flag set), ``finished:<status>``
        or ``unknown``."""
        k = self.keys
        return text(
            await self._cancel(
                keys=[
                    k.pending(session_id),
                    k.running(session_id),
                    k.turns(session_id),
                    k.cancel_flag(session_id, turn_id),
                ],
                args=[turn_id, self.cancel_ttl],
            )
        )

    async def cancel_mode(self, session_id: str, turn_id: str) -> str | None:
        """``cancel``, ``interrupt`` or ``rollback`` if the turn was asked to stop."""
        value = await self.redis.get(self.keys.cancel_flag(session_id, turn_id))
        return None if value is None else text(value)

    async def reap(self, limit: int = 100, retry_seconds: float = 30.0) -> list[str]:
        """Sessions whose deadline passed (a dead holder or a lost drain task)."""
        due = await self._reap(
            keys=[self.keys.lease_deadlines], args=[limit, int(retry_seconds * 1000)]
        )
        return [text(s) for s in due]

    async def watch(self, session_id: str, delay_seconds: float = 0.0) -> None:
        """Put the session under the reaper's eye: due after ``delay_seconds`` unless a
        lease holder pushes its deadline on first."""
        script = self._watch
        await script(keys=[self.keys.lease_deadlines], args=[int(delay_seconds * 1000), session_id])

    async def session_agent(self, session_id: str) -> str | None:
        """The agent a session belongs to, if Redis remembers it."""
        value = await self.redis.hget(self.keys.meta(session_id), "agent")
        return None if value is None else text(value)

    async def has_work(self, session_id: str) -> bool:
        """True when a turn is pending or left in the running slot."""
        k = self.keys
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.llen(k.pending(session_id))
            pipe.exists(k.running(session_id))
            pending, running = await pipe.execute()
        return bool(pending) or bool(running)

    async def session_of(self, turn_id: str) -> str | None:
        """The session a recent turn belongs to, or None if unknown."""
        sid = await self.redis.get(self.keys.turn_index(turn_id))
        return None if sid is None else text(sid)

    async def turn_status(self, turn_id: str) -> tuple[str, TurnStatus] | None:
        """(session_id, status) of a recent turn, or None if unknown."""
        session_id = await self.session_of(turn_id)
        if session_id is None:
            return None
        raw = await self.redis.hget(self.keys.turns(session_id), turn_id)
        if raw is None:
            return None
        return session_id, TurnStatus(text(raw))

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
