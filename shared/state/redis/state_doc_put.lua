-- Put a long-term store document: its value and update time, its creation time once.
-- KEYS: the namespace's hash, the namespace's key index (a sorted set, scores 0).
-- ARGV: key, value JSON, now.
-- Returns the document's creation time.
redis.call('HSETNX', KEYS[1], 'c:' .. ARGV[1], ARGV[3])
redis.call('HSET', KEYS[1], 'v:' .. ARGV[1], ARGV[2], 'u:' .. ARGV[1], ARGV[3])
redis.call('ZADD', KEYS[2], 0, ARGV[1])
return redis.call('HGET', KEYS[1], 'c:' .. ARGV[1])
