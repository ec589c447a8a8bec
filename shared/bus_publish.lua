-- Publish an event: append it to the session's capped stream, refresh the stream's
-- TTL, and mirror it, with the id the stream gave it, on the session's channel.
-- KEYS: events, channel; ARGV: maxlen, event JSON (without its id), ttl_s
-- Returns the stream id.
local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', 'e', ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[3])
redis.call('PUBLISH', KEYS[2], '{"id":"' .. id .. '",' .. string.sub(ARGV[2], 2))
return id
