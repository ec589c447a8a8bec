-- Give a turn back without charging the run (a worker shutting down): the next
-- claim adds one to `lost`, so lower it first.
-- Preludes: running_slot.
-- KEYS: running; ARGV: turn_id. Returns 1 if the slot held the turn.
local current = redis.call('GET', KEYS[1])
if not current then return 0 end
local attempt, lost, turn_id, payload = parse_running(current)
if turn_id ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], attempt .. '|' .. (lost - 1) .. '|' .. turn_id .. '|' .. payload)
return 1
