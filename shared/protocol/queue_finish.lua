-- Clear the running slot if it still holds this turn, and record the turn's status;
-- the turn's approvals (if it was parked) and checkpointed steps go with it.
-- Preludes: running_slot, finish_turn.
-- KEYS: running, turns, approvals, steps; ARGV: turn_id, status, ttl_s
finish_turn(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2], ARGV[3])
return 1
