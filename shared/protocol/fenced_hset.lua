-- Prelude: write one field of a session's hash (a turn's status, its checkpointed
-- steps) and refresh the hash's TTL, if the session's lease is held by `token` (a
-- decimal string; '' writes unfenced). Needs lease_token.
-- Returns true when written, false when another token holds the lease (nothing done).
local function fenced_hset(lease, token, hash, field, value, ttl)
  if token ~= '' and not lease_held_by(lease, token) then return false end
  redis.call('HSET', hash, field, value)
  redis.call('EXPIRE', hash, ttl)
  return true
end
