-- Prelude: give a session's lease up (lease_release.lua documents it). Needs deadlines, lease_token.
local function release_lease(lease, deadlines, approvals, token, sid)
  if not lease_held_by(lease, token) then return 0 end
  redis.call('DEL', lease)
  if redis.call('HGET', approvals, 'state') == 'waiting' then
    deadline_set(deadlines, sid, tonumber(redis.call('HGET', approvals, 'expires')))
  else
    deadline_clear(deadlines, sid)
  end
  return 1
end
