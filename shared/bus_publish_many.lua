-- Publish several events of one session, in order, in one call: each as
-- bus_publish.lua does (append to the capped stream, mirror on the channel with
-- its id), then refresh the stream's TTL once.
-- With a guard (ARGV[3] a token): publish only while the lease key holds that token,
-- and first record the turn's status, so a reader who saw the events never reads an
-- older status (a turn's final goes out this way).
-- Preludes: protocol/lease_token.
-- KEYS: events, channel[, lease, turns]
-- ARGV: maxlen, ttl_s, token or '', turn_id, status, status ttl_s, event JSON
-- (without its id)...
-- Returns the stream ids, in order, or false when the guard failed (nothing done).
if ARGV[3] ~= '' then
  if not lease_held_by(KEYS[3], ARGV[3]) then return false end
  redis.call('HSET', KEYS[4], ARGV[4], ARGV[5])
  redis.call('EXPIRE', KEYS[4], ARGV[6])
end
local ids = {}
for i = 7, #ARGV do
  local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', 'e', ARGV[i])
  redis.call('PUBLISH', KEYS[2], '{"id":"' .. id .. '",' .. string.sub(ARGV[i], 2))
  ids[#ids + 1] = id
end
redis.call('EXPIRE', KEYS[1], ARGV[2])
return ids
