-- Put a session under the reaper's eye: due after delay_ms unless a lease holder
-- pushes its deadline on first. Never pushes an earlier deadline later.
-- Preludes: now_ms, deadlines.
-- KEYS: deadlines; ARGV: delay_ms, session_id
deadline_no_later(KEYS[1], ARGV[2], now + tonumber(ARGV[1]))
return 1
