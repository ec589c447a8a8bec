-- Park the running turn until the child turns it delegated to have ended: no worker
-- holds it meanwhile. It shares the parked-turn hash with approvals (kind
-- 'children', never in the approvals index), so the claim, the release's deadline
-- and a cancel treat it like a turn waiting for people. When every child has a
-- result already (they ended before the park), it is parked 'ready': the drain's
-- next claim hands it out again at once.
-- Preludes: now_ms, running_slot.
-- KEYS: running, turns, approvals, children
-- ARGV: turn_id, calls JSON [{call_id, tool, keys}], timeout ms, status ttl s
-- Returns {state, expires_ms} (state 'waiting' or 'ready'), or {'gone'} when the
-- running slot no longer holds the turn.
local current = redis.call('GET', KEYS[1])
if not current then return {'gone'} end
local _, _, turn_id = parse_running(current)
if turn_id ~= ARGV[1] then return {'gone'} end
local state = 'ready'
for _, call in ipairs(cjson.decode(ARGV[2])) do
  for _, key in ipairs(call['keys']) do
    if redis.call('HEXISTS', KEYS[4], 'r:' .. key) == 0 then state = 'waiting' end
  end
end
redis.call('DEL', KEYS[3])
local expires = now + tonumber(ARGV[3])
redis.call('HSET', KEYS[3], 'turn', ARGV[1], 'state', state, 'kind', 'children',
           'calls', ARGV[2], 'expires', expires, 'requested', now)
redis.call('HSET', KEYS[2], ARGV[1], 'awaiting_children')
redis.call('EXPIRE', KEYS[2], ARGV[4])
return {state, tostring(expires)}
