-- Prelude: take a session's lease with a new fencing token, unless someone holds it
-- (lease_acquire.lua documents it). Needs now_ms, deadlines.
-- Returns the token, or false when the lease is held.
local function take_lease(lease, fence, deadlines, ttl_ms, owner, sid)
  if redis.call('EXISTS', lease) == 1 then return false end
  local token = redis.call('INCR', fence)
  redis.call('SET', lease, token .. ':' .. owner, 'PX', ttl_ms)
  deadline_set(deadlines, sid, now + tonumber(ttl_ms))
  return token
end
