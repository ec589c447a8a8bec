-- The drain's step after a turn that ran to its end, in one call: the turn's final
-- (after the events queued for it) published under the lease, its status recorded
-- first, as bus_publish_many.lua does with a status guard (a reader who saw the
-- final never reads an older status); then queue_next.lua's step: finish the turn,
-- claim the next one or give the lease up. A token that no longer holds the lease
-- does nothing at all: no final, no finish, no claim, no release. A repeat of the
-- call (once.lua) does nothing and returns the first run's reply: a final is
-- published once, and the next turn is not claimed again as a second attempt.
-- Preludes: now_ms, running_slot, approval_hold, deadlines, claim_next, finish_turn,
-- lease_token, lease_free, queue_step, fenced_hset, once, bus_append.
-- KEYS: events, channel, once, lease, turns, running, pending, approvals, cancel
-- prefix, approvals index, steps, deadlines
-- ARGV: maxlen, ttl_s, token, turn_id, status, status ttl_s (bus_publish_many.lua's),
-- session id, event JSON (without its id)...
-- Returns false when the token no longer holds the lease; else {stream ids, step},
-- the step being queue_next.lua's reply (a claim, or -1: the lease released).
local seen, reply = once_seen(KEYS[3])
if seen then return reply end
if not fenced_hset(KEYS[4], ARGV[3], KEYS[5], ARGV[4], ARGV[5], ARGV[6]) then
  return once_keep(KEYS[3], false)
end
local ids = publish_events(KEYS[1], KEYS[2], ARGV[1], ARGV[2], 8)
local step = queue_step(KEYS[6], KEYS[7], KEYS[5], KEYS[8], KEYS[9], KEYS[10], KEYS[11],
                        KEYS[4], KEYS[12], ARGV[7], ARGV[4], ARGV[5], ARGV[6], ARGV[3])
return once_keep(KEYS[3], {ids, step})
