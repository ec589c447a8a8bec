-- Extend a lease held with this token by the TTL.
-- Preludes: now_ms, deadlines.
-- KEYS: lease, fence, deadlines; ARGV: token, ttl_ms, session_id, owner
-- Returns 1 if renewed, 0 if a newer token holds the session.
-- A lease that expired while nobody else took it (the fence counter still equals
-- our token) is taken back: no newer holder exists, so nothing is unsafe.
local value = redis.call('GET', KEYS[1])
if value then
  if string.match(value, '^(%d+):') ~= ARGV[1] then return 0 end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
else
  if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
  redis.call('SET', KEYS[1], ARGV[1] .. ':' .. ARGV[4], 'PX', ARGV[2])
end
deadline_set(KEYS[3], ARGV[3], now + tonumber(ARGV[2]))
return 1
