-- Whether a drain has anything to do: a turn pending or left in the running slot,
-- unless the running turn is parked waiting for decisions (then nothing runs, and
-- the turns behind it wait: FIFO holds).
-- Preludes: now_ms, running_slot, approval_hold.
-- KEYS: running, pending, approvals, cancel prefix. Returns 1 or 0.
local current = redis.call('GET', KEYS[1])
if current then
  local _, _, turn_id = parse_running(current)
  if parked_state(KEYS[3], turn_id, KEYS[4], now) == 'waiting' then return 0 end
  return 1
end
if redis.call('LLEN', KEYS[2]) > 0 then return 1 end
return 0
