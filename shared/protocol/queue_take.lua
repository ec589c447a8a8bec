-- A drain's first step, in one call: take the session's lease (lease_acquire.lua),
-- then claim its first turn under the new token (queue_claim.lua); with nothing to
-- claim, give the lease straight back (lease_release.lua), as the drain's first
-- queue_next.lua would have.
-- Preludes: now_ms, running_slot, approval_hold, deadlines, claim_next, lease_token,
-- lease_free, lease_take, once.
-- KEYS: running, pending, turns, approvals, cancel prefix, approvals index, lease,
-- fence, deadlines, once (a repeat of the call does nothing: once.lua)
-- ARGV: session id, lease ttl_ms, owner
-- Returns false when someone holds the lease (nothing done); else {token} when
-- there was nothing to claim (the lease released), or {token, claim...} with
-- queue_claim.lua's reply after the token.
local seen, reply = once_seen(KEYS[10])
if seen then return reply end
local token = take_lease(KEYS[7], KEYS[8], KEYS[9], ARGV[2], ARGV[3], ARGV[1])
if not token then return once_keep(KEYS[10], false) end
local claimed = claim_next(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], ARGV[1])
if not claimed then
  release_lease(KEYS[7], KEYS[9], KEYS[4], tostring(token), ARGV[1])
  return once_keep(KEYS[10], {token})
end
table.insert(claimed, 1, token)
return once_keep(KEYS[10], claimed)
