-- The drain's step between turns, in one call: finish the turn that ran (when
-- ARGV[2] names one: queue_finish.lua), then, while the lease still holds the
-- token, claim the next turn (queue_claim.lua); with nothing to claim, give the
-- lease up (lease_release.lua). A turn pushed before this call is claimed, and one
-- pushed after it finds the lease free, so no release-then-recheck is needed.
-- Preludes: now_ms, running_slot, approval_hold, deadlines, claim_next, finish_turn,
-- lease_token, lease_free.
-- KEYS: running, pending, turns, approvals, cancel prefix, approvals index, steps,
-- lease, deadlines
-- ARGV: session id, finished turn_id or '', its status, status ttl_s, lease token
-- Returns the claim (queue_claim.lua's reply), or -1 when the lease was released
-- (nothing to claim), or -2 when the token no longer holds the lease (nothing
-- claimed, nothing released).
if ARGV[2] ~= '' then
  finish_turn(KEYS[1], KEYS[3], KEYS[4], KEYS[7], ARGV[2], ARGV[3], ARGV[4])
end
if not lease_held_by(KEYS[8], ARGV[5]) then return -2 end
local claimed = claim_next(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], ARGV[1])
if claimed then return claimed end
release_lease(KEYS[8], KEYS[9], KEYS[4], ARGV[5], ARGV[1])
return -1
