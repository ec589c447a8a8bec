-- Delete a long-term store document.
-- KEYS: the namespace's hash, the namespace's key index.
-- ARGV: key.
-- Returns 1 when it existed, else 0.
redis.call('HDEL', KEYS[1], 'v:' .. ARGV[1], 'c:' .. ARGV[1], 'u:' .. ARGV[1])
return redis.call('ZREM', KEYS[2], ARGV[1])
