-- Prelude: the drain's step between turns (queue_next.lua documents it). Needs
-- now_ms, running_slot, approval_hold, deadlines, claim_next, finish_turn,
-- lease_token, lease_free.
-- Returns the claim, or -1 (the lease released), or -2 (the token no longer holds it).
local function queue_step(running, pending, turns, approvals, cancel_prefix,
                          approvals_index, steps, lease, deadlines, sid, turn_id,
                          status, ttl, token)
  if turn_id ~= '' then
    finish_turn(running, turns, approvals, steps, turn_id, status, ttl)
  end
  if not lease_held_by(lease, token) then return -2 end
  local claimed = claim_next(running, pending, turns, approvals, cancel_prefix,
                             approvals_index, sid)
  if claimed then return claimed end
  release_lease(lease, deadlines, approvals, token, sid)
  return -1
end
