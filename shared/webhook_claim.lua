-- The webhook deliveries due (Webhooks.reap), each pushed to the next deadline in
-- the same call so that one reaper takes it.
-- KEYS: a shard's webhook deadlines. ARGV: now (Unix s), the next deadline, limit.
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
for _, member in ipairs(due) do
  redis.call('ZADD', KEYS[1], ARGV[2], member)
end
return due
