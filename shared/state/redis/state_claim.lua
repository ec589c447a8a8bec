-- Record a lease holder's fencing token, refusing an older one.
-- ARGV: fence.
if redis.call('EXISTS', KEYS[1]) == 0 then return {'ok'} end
local stored = tonumber(redis.call('HGET', KEYS[1], 'fence'))
if stored > tonumber(ARGV[1]) then return {'stale', tostring(stored)} end
redis.call('HSET', KEYS[1], 'fence', ARGV[1])
return {'ok'}
