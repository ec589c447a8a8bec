-- Store a running turn's checkpointed steps, if the lease is still the writer's.
-- Preludes: lease_token.
-- KEYS: steps, lease; ARGV: token ('' for unfenced), turn_id, checkpoint JSON, ttl_s
-- Returns 1 when stored, 0 when another token holds the lease (nothing written).
if ARGV[1] ~= '' and not lease_held_by(KEYS[2], ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
redis.call('EXPIRE', KEYS[1], ARGV[4])
return 1
