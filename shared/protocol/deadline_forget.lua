-- Drop a session's deadline if its lease is free.
-- Preludes: deadlines.
-- KEYS: lease, deadlines; ARGV: session_id. Returns 1 if a deadline was dropped.
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
return deadline_clear(KEYS[2], ARGV[1])
