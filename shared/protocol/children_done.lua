-- Record a child turn's result for its parent, once; when the parent is parked for
-- its children and this was the last one, make it ready (the caller dispatches a
-- drain of the parent's session; the deadline, within the grace, is the backstop).
-- Preludes: now_ms, deadlines.
-- KEYS: children, approvals, deadlines (all the parent session's)
-- ARGV: parent turn id, child key, child turn id, result JSON, parent session id, grace ms
-- Returns 'ready' | 'recorded' | 'again' (recorded before) | 'unknown' (no such child)
local link = redis.call('HGET', KEYS[1], 'c:' .. ARGV[2])
if not link or cjson.decode(link)['turn_id'] ~= ARGV[3] then return 'unknown' end
if redis.call('HSETNX', KEYS[1], 'r:' .. ARGV[2], ARGV[4]) == 0 then return 'again' end
if redis.call('HGET', KEYS[2], 'turn') ~= ARGV[1]
    or redis.call('HGET', KEYS[2], 'kind') ~= 'children'
    or redis.call('HGET', KEYS[2], 'state') ~= 'waiting' then
  return 'recorded'
end
for _, call in ipairs(cjson.decode(redis.call('HGET', KEYS[2], 'calls'))) do
  for _, key in ipairs(call['keys']) do
    if redis.call('HEXISTS', KEYS[1], 'r:' .. key) == 0 then return 'recorded' end
  end
end
redis.call('HSET', KEYS[2], 'state', 'ready')
deadline_no_later(KEYS[3], ARGV[5], now + tonumber(ARGV[6]))
return 'ready'
