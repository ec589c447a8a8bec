-- Start a webhook attempt (Webhooks.begin): unless the delivery is over, forgotten,
-- or this attempt (or a later one) was started already, mark it in flight, record
-- it, and give the delivery a deadline, in one call.
-- KEYS: the turn's webhook hash, its shard's webhook deadlines.
-- ARGV: attempt, its field, its in-flight record, the deadlines member, the
-- deadline (Unix s), the hash TTL (s). Returns 1 when started, 0 when not to be sent.
if redis.call('HEXISTS', KEYS[1], 'url') == 0 or redis.call('HGET', KEYS[1], 'done') then
  return 0
end
local n = tonumber(ARGV[1])
if tonumber(redis.call('HGET', KEYS[1], 'last') or '0') >= n then
  return 0
end
redis.call('HSET', KEYS[1], 'last', n, 'inflight', n, ARGV[2], ARGV[3])
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[6]))
redis.call('ZADD', KEYS[2], ARGV[5], ARGV[4])
return 1
