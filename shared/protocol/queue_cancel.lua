-- Cancel a turn: drop it from pending, or flag it if it runs.
-- Preludes: running_slot.
-- KEYS: pending, running, turns, cancel_flag; ARGV: turn_id, ttl_s
-- Returns {outcome, status}: the outcome is a CancelOutcome value (outcomes.py),
-- the status the turn's after the call ('' when unknown).
local items = redis.call('LRANGE', KEYS[1], 0, -1)
for _, item in ipairs(items) do
  local ok, decoded = pcall(cjson.decode, item)
  if ok and type(decoded) == 'table' and decoded['turn_id'] == ARGV[1] then
    redis.call('LREM', KEYS[1], 1, item)
    redis.call('HSET', KEYS[3], ARGV[1], 'cancelled')
    return {'cancelled', 'cancelled'}
  end
end
local current = redis.call('GET', KEYS[2])
if current then
  local _, _, turn_id = parse_running(current)
  if turn_id == ARGV[1] then
    redis.call('SET', KEYS[4], 'cancel', 'EX', tonumber(ARGV[2]))
    return {'cancelling', 'running'}
  end
end
local status = redis.call('HGET', KEYS[3], ARGV[1])
if status then return {'already_finished', status} end
return {'unknown', ''}
