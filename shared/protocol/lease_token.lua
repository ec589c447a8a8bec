-- Prelude: whether the session's lease (`<token>:<owner>`, with a TTL) is held by
-- `token` (a decimal string) right now.
local function lease_held_by(lease, token)
  local value = redis.call('GET', lease)
  return value and string.match(value, '^(%d+):') == token
end
