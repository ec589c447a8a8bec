-- Park the running turn: its tool calls wait for decisions, no worker holds it.
-- Preludes: now_ms, running_slot.
-- KEYS: running, turns, approvals, approvals index
-- ARGV: turn_id, calls JSON, timeout ms, session id, status ttl s
-- Returns {'ok', expires_ms}, or {'gone'} when the running slot no longer holds the turn.
local current = redis.call('GET', KEYS[1])
if not current then return {'gone'} end
local _, _, turn_id = parse_running(current)
if turn_id ~= ARGV[1] then return {'gone'} end
redis.call('DEL', KEYS[3])
local expires = now + tonumber(ARGV[3])
redis.call('HSET', KEYS[3], 'turn', ARGV[1], 'state', 'waiting', 'calls', ARGV[2],
           'expires', expires, 'requested', now)
redis.call('HSET', KEYS[2], ARGV[1], 'awaiting_approval')
redis.call('EXPIRE', KEYS[2], ARGV[5])
redis.call('SADD', KEYS[4], ARGV[4])
return {'ok', tostring(expires)}
