-- Clear the running slot if it still holds this turn, and record the turn's status;
-- the turn's approvals (if it was parked) and checkpointed steps go with it.
-- Preludes: running_slot.
-- KEYS: running, turns, approvals, steps; ARGV: turn_id, status, ttl_s
local current = redis.call('GET', KEYS[1])
if current then
  local _, _, turn_id = parse_running(current)
  if turn_id == ARGV[1] then redis.call('DEL', KEYS[1]) end
end
if ARGV[1] ~= '' then
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
  redis.call('EXPIRE', KEYS[2], ARGV[3])
  if redis.call('HGET', KEYS[3], 'turn') == ARGV[1] then redis.call('DEL', KEYS[3]) end
  redis.call('HDEL', KEYS[4], ARGV[1])
end
return 1
