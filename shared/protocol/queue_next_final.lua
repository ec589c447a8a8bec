-- The drain's step after a turn that ran to its end, in one call: the turn's final
-- (after the events queued for it) published under the lease, its status recorded
-- first, as bus_publish_many.lua does with a status guard (a reader who saw the
-- final never reads an older status); then queue_next.lua's step: finish the turn,
-- claim the next one or give the lease up. A token that no longer holds the lease
-- does nothing at all: no final, no finish, no claim, no release.
-- Preludes: now_ms, running_slot, approval_hold, deadlines, claim_next, finish_turn,
-- lease_token, lease_free, queue_step, fenced_hset, bus_append.
-- KEYS: events, channel, lease, turns, running, pending, approvals, cancel prefix,
-- approvals index, steps, deadlines
-- ARGV: maxlen, ttl_s, token, turn_id, status, status ttl_s (bus_publish_many.lua's),
-- session id, event JSON (without its id)...
-- Returns false when the token no longer holds the lease; else {stream ids, step},
-- the step being queue_next.lua's reply (a claim, or -1: the lease released).
if not fenced_hset(KEYS[3], ARGV[3], KEYS[4], ARGV[4], ARGV[5], ARGV[6]) then
  return false
end
local ids = publish_events(KEYS[1], KEYS[2], ARGV[1], ARGV[2], 8)
local step = queue_step(KEYS[5], KEYS[6], KEYS[4], KEYS[7], KEYS[8], KEYS[9], KEYS[10],
                        KEYS[3], KEYS[11], ARGV[7], ARGV[4], ARGV[5], ARGV[6], ARGV[3])
return {ids, step}
