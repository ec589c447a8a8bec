-- Store a running turn's checkpointed steps, if the lease is still the writer's.
-- (A checkpoint stored with events goes through bus_publish_many.lua's guard.)
-- Preludes: lease_token, fenced_hset.
-- KEYS: steps, lease; ARGV: token ('' for unfenced), turn_id, checkpoint JSON, ttl_s
-- Returns 1 when stored, 0 when another token holds the lease (nothing written).
return fenced_hset(KEYS[2], ARGV[1], KEYS[1], ARGV[2], ARGV[3], ARGV[4]) and 1 or 0
