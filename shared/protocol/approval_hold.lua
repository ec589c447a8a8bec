-- Prelude: a session's parked turn (approvals.py documents the hash). Needs now_ms.
-- The state of the parked turn `turn_id` in the approvals hash `approvals`:
--   'none'      the hash is not this turn's (it was never parked, or is done)
--   'waiting'   calls wait for decisions: the session holds, no worker runs it
--   'ready'     every call has a decision: the turn resumes at the next claim
--   'expired'   the decisions' time is up: undecided calls count as denied
--   'cancelled' a cancel flag was raised while it waited: the claim hands it out
--               so the drain ends it (a rollback or interrupt submit)
--   'resumed'   it was handed out again after its decisions (a later loss of that
--               run is a lost run like any other)
local function parked_state(approvals, turn_id, cancel_prefix, now)
  if turn_id == '' or redis.call('HGET', approvals, 'turn') ~= turn_id then return 'none' end
  local state = redis.call('HGET', approvals, 'state')
  if state ~= 'waiting' then return state end
  if redis.call('EXISTS', cancel_prefix .. turn_id) == 1 then return 'cancelled' end
  if now >= tonumber(redis.call('HGET', approvals, 'expires')) then return 'expired' end
  return 'waiting'
end

-- Deny every call of the parked turn that has no decision ('no decision in time');
-- returns their call ids.
local function expire_undecided(approvals, now)
  -- A turn parked for its child turns has no decisions to deny (the drain cancels the
  -- children still running).
  if redis.call('HGET', approvals, 'kind') == 'children' then return {} end
  local calls = cjson.decode(redis.call('HGET', approvals, 'calls'))
  local ids = {}
  for _, call in ipairs(calls) do
    local field = 'd:' .. call['call_id']
    if redis.call('HEXISTS', approvals, field) == 0 then
      local decision = {approved = false, reason = 'no decision in time',
                        by = 'reactq:timeout', at = now}
      redis.call('HSET', approvals, field, cjson.encode(decision))
      ids[#ids + 1] = call['call_id']
    end
  end
  return ids
end
