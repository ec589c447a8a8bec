-- Prelude: give a session's lease up (lease_release.lua documents it). Needs deadlines.
local function release_lease(lease, deadlines, approvals, token, sid)
  local value = redis.call('GET', lease)
  if not value or string.match(value, '^(%d+):') ~= token then return 0 end
  redis.call('DEL', lease)
  if redis.call('HGET', approvals, 'state') == 'waiting' then
    deadline_set(deadlines, sid, tonumber(redis.call('HGET', approvals, 'expires')))
  else
    deadline_clear(deadlines, sid)
  end
  return 1
end
