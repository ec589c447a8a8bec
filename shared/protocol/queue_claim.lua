-- Move the next turn into the running slot, or hand out again the one a dead
-- holder left there (attempt and lost each one more).
-- Preludes: running_slot.
-- KEYS: running, pending, turns
-- Returns {attempt, lost, turn_id, payload}, or nil when there is nothing to run.
local running, pending, turns = KEYS[1], KEYS[2], KEYS[3]
local current = redis.call('GET', running)
if current then
  local attempt, lost, turn_id, payload = parse_running(current)
  attempt, lost = attempt + 1, lost + 1
  redis.call('SET', running, attempt .. '|' .. lost .. '|' .. turn_id .. '|' .. payload)
  return {attempt, lost, turn_id, payload}
end
local nxt = redis.call('LPOP', pending)
if not nxt then
  return nil
end
-- a malformed payload still leaves pending, so it can be reported and the queue goes on
local ok, decoded = pcall(cjson.decode, nxt)
local turn_id = ok and type(decoded) == 'table' and decoded['turn_id'] or ''
if type(turn_id) ~= 'string' or string.find(turn_id, '|', 1, true) then turn_id = '' end
redis.call('SET', running, '1|0|' .. turn_id .. '|' .. nxt)
if turn_id ~= '' then redis.call('HSET', turns, turn_id, 'running') end
return {1, 0, turn_id, nxt}
