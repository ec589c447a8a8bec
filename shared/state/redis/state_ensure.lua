-- Create the session (its trunk branch) unless it exists.
-- ARGV: agent, now, record version. Returns the session's v, agent, active, fence, created_at.
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'v', ARGV[3], 'agent', ARGV[1], 'active', 'trunk',
             'fence', 0, 'created_at', ARGV[2], 'updated_at', ARGV[2])
  redis.call('HSET', KEYS[2], 'f:trunk', 0, 'l:trunk', 0, 'c:trunk', ARGV[2])
end
return redis.call('HMGET', KEYS[1], 'v', 'agent', 'active', 'fence', 'created_at')
