-- Publish several events of one session, in order, in one call (bus_append.lua).
-- With a guard (KEYS[5], a hash of the session): publish only while the lease key
-- holds the token ARGV[3] ('' for none), and first write the guard's record into
-- that hash: the turn's status (a turn's final goes out this way, so a reader who
-- saw it never reads an older status) or the turn's checkpointed steps (the events
-- of a step go out with its checkpoint: protocol/steps.py). protocol/fenced_hset.lua
-- writes it, as steps_save.lua does. A repeat of the call (once.lua) does nothing
-- and returns the first run's reply.
-- Preludes: once, protocol/lease_token, protocol/fenced_hset, bus_append.
-- KEYS: events, channel, once[, lease, record hash]
-- ARGV: maxlen, ttl_s, token or '', record field, record value, record ttl_s, event
-- JSON (without its id)...
-- Returns the stream ids, in order, or false when the guard failed (nothing done).
local seen, reply = once_seen(KEYS[3])
if seen then return reply end
if KEYS[5] and not fenced_hset(KEYS[4], ARGV[3], KEYS[5], ARGV[4], ARGV[5], ARGV[6]) then
  return once_keep(KEYS[3], false)
end
return once_keep(KEYS[3], publish_events(KEYS[1], KEYS[2], ARGV[1], ARGV[2], 7))
