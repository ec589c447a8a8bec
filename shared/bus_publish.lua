-- Publish an event: append it to the session's capped stream, mirror it, with the
-- id the stream gave it, on the session's channel, and refresh the stream's TTL.
-- A repeat of the call (once.lua) publishes nothing and returns the first id.
-- Preludes: once, bus_append.
-- KEYS: events, channel, once; ARGV: maxlen, ttl_s, event JSON (without its id)
-- Returns the stream id.
local seen, reply = once_seen(KEYS[3])
if seen then return reply end
return once_keep(KEYS[3], publish_events(KEYS[1], KEYS[2], ARGV[1], ARGV[2], 3)[1])
