-- Take a session's lease with a new fencing token, unless someone holds it; the
-- session's deadline moves to the lease's expiry.
-- Preludes: now_ms, deadlines, lease_take.
-- KEYS: lease, fence, deadlines; ARGV: ttl_ms, owner, session_id
-- Returns the token, or false when the lease is held.
return take_lease(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3])
