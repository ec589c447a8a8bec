-- Take a session's lease with a new fencing token, unless someone holds it.
-- Preludes: now_ms, deadlines.
-- KEYS: lease, fence, deadlines; ARGV: ttl_ms, owner, session_id
-- Returns the token, or false when the lease is held.
if redis.call('EXISTS', KEYS[1]) == 1 then return false end
local token = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], token .. ':' .. ARGV[2], 'PX', ARGV[1])
deadline_set(KEYS[3], ARGV[3], now + tonumber(ARGV[1]))
return token
