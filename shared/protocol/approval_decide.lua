-- Record decisions on a parked turn's waiting calls, all or none. Two deciders
-- racing on one call: the first script to run wins, the second finds a decision.
-- When every call has one, the turn is ready: the caller dispatches a drain, and the
-- session's deadline (no later than the dispatch grace) is the backstop.
-- A repeat of the call (once.lua) does nothing and returns the first run's reply: a
-- decider's own decision is never its conflict.
-- Preludes: now_ms, deadlines, once.
-- KEYS: approvals, turns, approvals index, deadlines, once
-- ARGV: turn_id, decisions JSON [{call_id, approved, reason}], by, session id, grace ms
-- Returns {'ready'} | {'waiting', undecided} | {'closed', status} | {'expired'}
--   | {'unknown_call', call_id} | {'conflict', call_id, decision JSON}
local seen, reply = once_seen(KEYS[5])
if seen then return reply end
local wanted = cjson.decode(ARGV[2])
-- A turn parked for its child turns takes no decisions: it is closed to deciders.
if redis.call('HGET', KEYS[1], 'turn') ~= ARGV[1]
    or redis.call('HGET', KEYS[1], 'kind') == 'children' then
  return once_keep(KEYS[5], {'closed', redis.call('HGET', KEYS[2], ARGV[1]) or ''})
end
if redis.call('HGET', KEYS[1], 'state') ~= 'waiting' then
  -- Decided in full already (it resumes, or runs): a racing decider lost.
  for _, d in ipairs(wanted) do
    local prior = redis.call('HGET', KEYS[1], 'd:' .. d['call_id'])
    if prior then return once_keep(KEYS[5], {'conflict', d['call_id'], prior}) end
  end
  return once_keep(KEYS[5], {'closed', redis.call('HGET', KEYS[2], ARGV[1]) or ''})
end
local calls = cjson.decode(redis.call('HGET', KEYS[1], 'calls'))
local known = {}
for _, call in ipairs(calls) do known[call['call_id']] = true end
for _, d in ipairs(wanted) do
  if not known[d['call_id']] then return once_keep(KEYS[5], {'unknown_call', d['call_id']}) end
  local prior = redis.call('HGET', KEYS[1], 'd:' .. d['call_id'])
  if prior then return once_keep(KEYS[5], {'conflict', d['call_id'], prior}) end
end
-- Past the expiry the timeout has won, though no claim has written its denials yet.
if now >= tonumber(redis.call('HGET', KEYS[1], 'expires')) then return once_keep(KEYS[5], {'expired'}) end
for _, d in ipairs(wanted) do
  d['by'] = ARGV[3]
  d['at'] = now
  redis.call('HSET', KEYS[1], 'd:' .. d['call_id'], cjson.encode(d))
end
local undecided = 0
for _, call in ipairs(calls) do
  if redis.call('HEXISTS', KEYS[1], 'd:' .. call['call_id']) == 0 then undecided = undecided + 1 end
end
if undecided > 0 then return once_keep(KEYS[5], {'waiting', tostring(undecided)}) end
redis.call('HSET', KEYS[1], 'state', 'ready')
redis.call('SREM', KEYS[3], ARGV[4])
deadline_no_later(KEYS[4], ARGV[4], now + tonumber(ARGV[5]))
return once_keep(KEYS[5], {'ready'})
