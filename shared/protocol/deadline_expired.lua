-- The sessions whose deadline passed, left as they are.
-- Preludes: now_ms.
-- KEYS: deadlines; ARGV: limit, now_ms ('' for the server's clock)
if ARGV[2] ~= '' then now = tonumber(ARGV[2]) end
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
