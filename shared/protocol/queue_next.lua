-- The drain's step between turns, in one call: finish the turn that ran (when
-- ARGV[2] names one: queue_finish.lua), then, while the lease still holds the
-- token, claim the next turn (queue_claim.lua); with nothing to claim, give the
-- lease up (lease_release.lua). A turn pushed before this call is claimed, and one
-- pushed after it finds the lease free, so no release-then-recheck is needed.
-- (queue_next_final.lua takes the same step with a turn's final.)
-- Preludes: now_ms, running_slot, approval_hold, deadlines, claim_next, finish_turn,
-- lease_token, lease_free, queue_step, once.
-- KEYS: running, pending, turns, approvals, cancel prefix, approvals index, steps,
-- lease, deadlines, once (a repeat of the call does nothing: once.lua)
-- ARGV: session id, finished turn_id or '', its status, status ttl_s, lease token
-- Returns the claim (queue_claim.lua's reply), or -1 when the lease was released
-- (nothing to claim), or -2 when the token no longer holds the lease (nothing
-- claimed, nothing released).
local seen, reply = once_seen(KEYS[10])
if seen then return reply end
return once_keep(KEYS[10], queue_step(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6],
                 KEYS[7], KEYS[8], KEYS[9], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]))
