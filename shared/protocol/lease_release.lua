-- Compare-and-delete the lease, and drop its deadline.
-- Preludes: deadlines.
-- KEYS: lease, deadlines; ARGV: token, session_id
-- Returns 1 if released, 0 if the token no longer held it.
local value = redis.call('GET', KEYS[1])
if not value or string.match(value, '^(%d+):') ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
deadline_clear(KEYS[2], ARGV[2])
return 1
