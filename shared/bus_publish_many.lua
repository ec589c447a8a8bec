-- Publish several events of one session, in order, in one call: each as
-- bus_publish.lua does (append to the capped stream, mirror on the channel with
-- its id), then refresh the stream's TTL once.
-- KEYS: events, channel; ARGV: maxlen, ttl_s, event JSON (without its id)...
-- Returns the stream ids, in order.
local ids = {}
for i = 3, #ARGV do
  local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', 'e', ARGV[i])
  redis.call('PUBLISH', KEYS[2], '{"id":"' .. id .. '",' .. string.sub(ARGV[i], 2))
  ids[#ids + 1] = id
end
redis.call('EXPIRE', KEYS[1], ARGV[2])
return ids
