-- Prelude: end a turn in the queue (queue_finish.lua documents it). Needs running_slot.
local function finish_turn(running, turns, approvals, steps, turn_id, status, ttl)
  local current = redis.call('GET', running)
  if current then
    local _, _, running_id = parse_running(current)
    if running_id == turn_id then redis.call('DEL', running) end
  end
  if turn_id ~= '' then
    redis.call('HSET', turns, turn_id, status)
    redis.call('EXPIRE', turns, ttl)
    if redis.call('HGET', approvals, 'turn') == turn_id then redis.call('DEL', approvals) end
    redis.call('HDEL', steps, turn_id)
  end
end
