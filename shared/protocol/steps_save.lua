-- Store a running turn's checkpointed steps, if the lease is still the writer's.
-- KEYS: steps, lease; ARGV: token ('' for unfenced), turn_id, checkpoint JSON, ttl_s
-- Returns 1 when stored, 0 when another token holds the lease (nothing written).
if ARGV[1] ~= '' then
  local value = redis.call('GET', KEYS[2])
  if not value or string.match(value, '^(%d+):') ~= ARGV[1] then return 0 end
end
redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
redis.call('EXPIRE', KEYS[1], ARGV[4])
return 1
