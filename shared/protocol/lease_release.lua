-- Compare-and-delete the lease, and drop its deadline, or, when the session's
-- running turn is parked waiting for decisions, set the deadline to when its
-- decisions expire (the reaper then resumes it with the undecided calls denied).
-- Preludes: deadlines, lease_token, lease_free.
-- KEYS: lease, deadlines, approvals; ARGV: token, session_id
-- Returns 1 if released, 0 if the token no longer held it.
return release_lease(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2])
