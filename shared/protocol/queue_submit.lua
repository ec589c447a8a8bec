-- Submit a turn: apply its multitask strategy and push it, atomically.
-- A repeat of the call (once.lua) does nothing and returns the first run's reply: a
-- turn is pushed once, and its own push never counts as the session being busy.
-- Preludes: now_ms, running_slot, deadlines, once.
-- KEYS: meta, pending, running, turns, deadlines, cancel_prefix, once
-- ARGV: agent, payload, turn_id, strategy, ttl_s, session_id, grace_ms, cancel_ttl_s
-- Returns {status, position, session_agent, stopped_running, dropped_pending...}
local meta, pending, running, turns, deadlines = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local agent, payload, turn_id, strategy = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local ttl, sid = tonumber(ARGV[5]), ARGV[6]
local seen, reply = once_seen(KEYS[7])
if seen then return reply end
local current = redis.call('HGET', meta, 'agent')
if current and current ~= agent then
  return once_keep(KEYS[7], {'agent_mismatch', 0, current, ''})
end
local run = redis.call('GET', running)
local busy = run or redis.call('LLEN', pending) > 0
if strategy == 'reject' and busy then
  redis.call('HSET', turns, turn_id, 'rejected')
  redis.call('EXPIRE', turns, ttl)
  return once_keep(KEYS[7], {'rejected', 0, '', ''})
end
local out = {'queued', 0, '', ''}
if strategy == 'interrupt' or strategy == 'rollback' then
  -- The new message supersedes what is in flight: stop the running turn (the
  -- worker reads the mode from the flag) and drop the turns still waiting.
  if run then
    local _, _, running_id = parse_running(run)
    if running_id ~= '' then
      redis.call('SET', KEYS[6] .. running_id, strategy, 'EX', tonumber(ARGV[8]))
      out[4] = running_id
    end
  end
  local waiting = redis.call('LRANGE', pending, 0, -1)
  redis.call('DEL', pending)
  for _, item in ipairs(waiting) do
    local ok, decoded = pcall(cjson.decode, item)
    if ok and type(decoded) == 'table' and type(decoded['turn_id']) == 'string' then
      redis.call('HSET', turns, decoded['turn_id'], 'cancelled')
      table.insert(out, decoded['turn_id'])
    end
  end
end
redis.call('HSET', meta, 'agent', agent)
redis.call('EXPIRE', meta, ttl)
out[2] = redis.call('RPUSH', pending, payload)
redis.call('HSET', turns, turn_id, 'queued')
redis.call('EXPIRE', turns, ttl)
-- A dispatch lost on its way to a worker is found by the reaper after the grace.
deadline_add(deadlines, sid, now + tonumber(ARGV[7]))
return once_keep(KEYS[7], out)
