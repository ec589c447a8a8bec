-- Delete a session's queue keys, unless one of its turns runs, is parked or waits.
-- KEYS: running slot, lease, pending, events, meta, turn statuses, steps, approvals,
--   the deadline set and the parked-turn index that hold the session (its shard's).
-- ARGV: session id.
-- Returns {'busy'} or {'ok', keys deleted, turn ids it had statuses of...}: their
-- index keys are not in the session's slot, the caller deletes them. The fencing
-- counter stays: a turn started later must get a newer token than any before.
if redis.call('EXISTS', KEYS[1]) == 1 or redis.call('EXISTS', KEYS[2]) == 1
    or redis.call('LLEN', KEYS[3]) > 0 then
  return {'busy'}
end
local turns = redis.call('HKEYS', KEYS[6])
local n = redis.call('DEL', KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8])
redis.call('ZREM', KEYS[9], ARGV[1])
redis.call('SREM', KEYS[10], ARGV[1])
local out = {'ok', n}
for i = 1, #turns do out[#out + 1] = turns[i] end
return out
