-- Patch a session's metadata: set some keys, remove others; one field a key.
-- KEYS: the state hash, the metadata hash.
-- ARGV: now, how many keys to set, then key, JSON value pairs, then keys to remove.
-- Returns {'no_session'} or {'ok', key, value, ...} (the whole metadata after).
if redis.call('EXISTS', KEYS[1]) == 0 then return {'no_session'} end
local n = tonumber(ARGV[2])
for i = 0, n - 1 do redis.call('HSET', KEYS[2], ARGV[3 + 2 * i], ARGV[4 + 2 * i]) end
for i = 3 + 2 * n, #ARGV do redis.call('HDEL', KEYS[2], ARGV[i]) end
redis.call('HSET', KEYS[1], 'updated_at', ARGV[1])
local out = redis.call('HGETALL', KEYS[2])
table.insert(out, 1, 'ok')
return out
