-- Put the session's fencing counter back above the state store's fence: Redis lost
-- its data (a restart without persistence, a failover to an empty replica) and the
-- counter started again from 0, so every token it gives is refused by the store.
-- Done only while `token` holds the lease and is the newest token the counter gave
-- (no newer holder exists): the counter is set to the store's fence, the lease is
-- given up (its deadline left as a backstop) and the turn in the running slot is
-- given back uncharged, so the holder's next take gets a token above the fence and
-- runs the turn again at once.
-- Preludes: lease_token, running_slot.
-- KEYS: lease, fence, running; ARGV: token, the store's fence
-- Returns 1 when re-seeded, 0 otherwise (nothing done).
if not lease_held_by(KEYS[1], ARGV[1]) then return 0 end
local counter = tonumber(redis.call('GET', KEYS[2]) or '0')
local fence = tonumber(ARGV[2])
if counter ~= tonumber(ARGV[1]) or fence <= counter then return 0 end
redis.call('SET', KEYS[2], fence)
local current = redis.call('GET', KEYS[3])
if current then
  local attempt, lost, turn_id, payload = parse_running(current)
  redis.call('SET', KEYS[3], attempt .. '|' .. (lost - 1) .. '|' .. turn_id .. '|' .. payload)
end
redis.call('DEL', KEYS[1])
return 1
