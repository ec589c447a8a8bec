-- Prelude: claim a session's next turn (queue_claim.lua documents the reply).
-- Needs now_ms, running_slot, approval_hold.
local function claim_next(running, pending, turns, approvals, cancel_prefix, approvals_index, sid)
  local current = redis.call('GET', running)
  if current then
    local attempt, lost, turn_id, payload = parse_running(current)
    local parked = parked_state(approvals, turn_id, cancel_prefix, now)
    if parked == 'waiting' then return nil end
    local expired = {}
    if parked == 'none' or parked == 'resumed' then
      attempt, lost = attempt + 1, lost + 1
      parked = ''
    else
      attempt = attempt + 1
      if parked == 'expired' then expired = expire_undecided(approvals, now) end
      redis.call('HSET', approvals, 'state', 'resumed')
      redis.call('SREM', approvals_index, sid)
      redis.call('HSET', turns, turn_id, 'running')
    end
    redis.call('SET', running, attempt .. '|' .. lost .. '|' .. turn_id .. '|' .. payload)
    local cancel = turn_id ~= '' and redis.call('GET', cancel_prefix .. turn_id) or ''
    return {attempt, lost, turn_id, payload, '', parked, table.concat(expired, ','), cancel}
  end
  local nxt = redis.call('LPOP', pending)
  if not nxt then
    return nil
  end
  -- a payload that cannot be a turn still leaves pending, so it can be reported and
  -- the queue goes on
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
    cancel = redis.call('GET', cancel_prefix .. turn_id) or ''
  end
  return {1, 0, turn_id, nxt, '', '', '', cancel}
end
