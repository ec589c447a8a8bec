-- Cancel a turn: drop it from pending, end it if it is parked waiting for
-- decisions, or flag it if it runs.
-- A repeat of the call (once.lua) does nothing and returns the first run's reply
-- (a second run would find a dropped turn gone and say so, and its final be lost).
-- Preludes: now_ms, running_slot, deadlines, once.
-- KEYS: pending, running, turns, cancel_flag, approvals, approvals index, deadlines,
-- steps, once
-- ARGV: turn_id, ttl_s, session id, dispatch grace ms
-- Returns {outcome, status}: the outcome is a CancelOutcome value (outcomes.py),
-- the status the turn's after the call ('' when unknown).
local seen, reply = once_seen(KEYS[9])
if seen then return reply end
local items = redis.call('LRANGE', KEYS[1], 0, -1)
for _, item in ipairs(items) do
  local ok, decoded = pcall(cjson.decode, item)
  if ok and type(decoded) == 'table' and decoded['turn_id'] == ARGV[1] then
    redis.call('LREM', KEYS[1], 1, item)
    redis.call('HSET', KEYS[3], ARGV[1], 'cancelled')
    return once_keep(KEYS[9], {'cancelled', 'cancelled'})
  end
end
local current = redis.call('GET', KEYS[2])
if current then
  local _, _, turn_id = parse_running(current)
  if turn_id == ARGV[1] then
    if redis.call('HGET', KEYS[5], 'turn') == turn_id
        and redis.call('HGET', KEYS[5], 'state') == 'waiting' then
      -- Parked: no worker holds it, so the cancel ends it here; the turns behind it
      -- are due at once (the caller dispatches a drain; the deadline is the backstop).
      redis.call('DEL', KEYS[2], KEYS[5])
      redis.call('HDEL', KEYS[8], ARGV[1])  -- its steps are not kept
      redis.call('SREM', KEYS[6], ARGV[3])
      redis.call('HSET', KEYS[3], ARGV[1], 'cancelled')
      if redis.call('LLEN', KEYS[1]) > 0 then
        deadline_no_later(KEYS[7], ARGV[3], now + tonumber(ARGV[4]))
      else
        deadline_clear(KEYS[7], ARGV[3])
      end
      return once_keep(KEYS[9], {'cancelled', 'cancelled'})
    end
    redis.call('SET', KEYS[4], 'cancel', 'EX', tonumber(ARGV[2]))
    return once_keep(KEYS[9], {'cancelling', 'running'})
  end
end
local status = redis.call('HGET', KEYS[3], ARGV[1])
if status then return once_keep(KEYS[9], {'already_finished', status}) end
return once_keep(KEYS[9], {'unknown', ''})
