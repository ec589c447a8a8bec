-- Compare-and-delete the lease, and drop its deadline, or, when the session's
-- running turn is parked waiting for decisions, set the deadline to when its
-- decisions expire (the reaper then resumes it with the undecided calls denied).
-- Preludes: deadlines.
-- KEYS: lease, deadlines, approvals; ARGV: token, session_id
-- Returns 1 if released, 0 if the token no longer held it.
local value = redis.call('GET', KEYS[1])
if not value or string.match(value, '^(%d+):') ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
if redis.call('HGET', KEYS[3], 'state') == 'waiting' then
  deadline_set(KEYS[2], ARGV[2], tonumber(redis.call('HGET', KEYS[3], 'expires')))
else
  deadline_clear(KEYS[2], ARGV[2])
end
return 1
