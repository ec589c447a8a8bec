-- Store a running turn's checkpoint (its completed steps), checking the fence; a
-- turn that already has a record is refused ('committed', nothing written).
-- KEYS: the state hash, the turn records, the checkpoints.
-- ARGV: fence ('' unfenced), turn id, checkpoint JSON.
if redis.call('EXISTS', KEYS[1]) == 0 then return {'no_session'} end
local stored = tonumber(redis.call('HGET', KEYS[1], 'fence'))
local fence = tonumber(ARGV[1]) -- nil: unfenced
if fence and stored > fence then return {'stale', tostring(stored)} end
if redis.call('HEXISTS', KEYS[2], ARGV[2]) == 1 then return {'committed'} end
if fence and fence > stored then redis.call('HSET', KEYS[1], 'fence', ARGV[1]) end
redis.call('HSET', KEYS[3], ARGV[2], ARGV[3])
return {'ok'}
