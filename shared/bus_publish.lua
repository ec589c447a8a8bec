-- Publish an event: append it to the session's capped stream, mirror it, with the
-- id the stream gave it, on the session's channel, and refresh the stream's TTL.
-- Preludes: bus_append.
-- KEYS: events, channel; ARGV: maxlen, ttl_s, event JSON (without its id)
-- Returns the stream id.
return publish_events(KEYS[1], KEYS[2], ARGV[1], ARGV[2], 3)[1]
