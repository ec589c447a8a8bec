-- Prelude: publish events of one session, in order: append each to the session's
-- capped stream, and mirror it, with the id the stream gave it, on the session's
-- channel (each event is a JSON object without "id", so it starts with "{" and has
-- a field); then refresh the stream's TTL. The events are ARGV[first] onwards.
-- Every script that publishes events goes through this function.
-- Returns the stream ids, in order.
local function publish_events(events, channel, maxlen, ttl, first)
  local ids = {}
  for i = first, #ARGV do
    local id = redis.call('XADD', events, 'MAXLEN', '~', maxlen, '*', 'e', ARGV[i])
    redis.call('PUBLISH', channel, '{"id":"' .. id .. '",' .. string.sub(ARGV[i], 2))
    ids[#ids + 1] = id
  end
  redis.call('EXPIRE', events, ttl)
  return ids
end
