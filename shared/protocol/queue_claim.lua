-- Move the next turn into the running slot, or hand out again the one a dead
-- holder left there (attempt and lost each one more), or the parked one whose
-- decisions are in (attempt one more: a parked turn was not lost).
-- Preludes: now_ms, running_slot, approval_hold.
-- KEYS: running, pending, turns, approvals, cancel prefix, approvals index
-- ARGV: session id
-- Returns {attempt, lost, turn_id, payload, ran, parked, expired, cancel}, or nil when
-- there is nothing to run: an empty session, or one whose running turn waits for
-- decisions (the turns behind it wait too: FIFO holds).
-- turn_id is '' unless the payload is a JSON object with a valid turn id
-- (valid_turn_id). ran is '' for a turn to run; for a copy of a turn id that has
-- run (its status is past 'queued') it is that status, and the copy leaves pending
-- without entering the running slot: a turn id runs at most once. parked is the
-- parked_state of a turn handed out again after waiting ('' otherwise); expired
-- the call ids this claim denied for want of a decision, comma-separated. cancel
-- is the turn's cancel flag (how it was asked to stop), '' when it was not.
local running, pending, turns = KEYS[1], KEYS[2], KEYS[3]
local current = redis.call('GET', running)
if current then
  local attempt, lost, turn_id, payload = parse_running(current)
  local parked = parked_state(KEYS[4], turn_id, KEYS[5], now)
  if parked == 'waiting' then return nil end
  local expired = {}
  if parked == 'none' or parked == 'resumed' then
    attempt, lost = attempt + 1, lost + 1
    parked = ''
  else
    attempt = attempt + 1
    if parked == 'expired' then expired = expire_undecided(KEYS[4], now) end
    redis.call('HSET', KEYS[4], 'state', 'resumed')
    redis.call('SREM', KEYS[6], ARGV[1])
    redis.call('HSET', turns, turn_id, 'running')
  end
  redis.call('SET', running, attempt .. '|' .. lost .. '|' .. turn_id .. '|' .. payload)
  local cancel = turn_id ~= '' and redis.call('GET', KEYS[5] .. turn_id) or ''
  return {attempt, lost, turn_id, payload, '', parked, table.concat(expired, ','), cancel}
end
local nxt = redis.call('LPOP', pending)
if not nxt then
  return nil
end
-- a payload that cannot be a turn still leaves pending, so it can be reported and the queue goes on
local ok, decoded = pcall(cjson.decode, nxt)
local turn_id = ok and type(decoded) == 'table' and decoded['turn_id'] or ''
if not valid_turn_id(turn_id) then turn_id = '' end
if turn_id ~= '' then
  local status = redis.call('HGET', turns, turn_id)
  if status and status ~= 'queued' then return {0, 0, turn_id, nxt, status, '', '', ''} end
end
redis.call('SET', running, '1|0|' .. turn_id .. '|' .. nxt)
local cancel = ''
if turn_id ~= '' then
  redis.call('HSET', turns, turn_id, 'running')
  cancel = redis.call('GET', KEYS[5] .. turn_id) or ''
end
return {1, 0, turn_id, nxt, '', '', '', cancel}
