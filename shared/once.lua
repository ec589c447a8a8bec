-- Prelude: a call that acts once, however many times it runs. redis-py sends a
-- command again when its connection broke before the reply came (redis_client.py,
-- resilient_options), and the server may have run it already: the reply was lost
-- with the connection, or a paused server runs both copies when it resumes. A
-- script that must not act twice (a publish, a push, a claim) is given a key of
-- its own for each call (`Keys.once`): the first run keeps its reply there, and a
-- repeat returns that reply and does nothing else. The key outlives every resend
-- of the call (ONCE_TTL_MS; redis_client.py's ONCE_TTL_SECONDS says why it is enough).
local ONCE_TTL_MS = 120000

-- True and the kept reply when this call ran before; false otherwise.
local function once_seen(key)
  local kept = redis.call('GET', key)
  if kept then return true, cjson.decode(kept) end
  return false, nil
end

-- Keep the call's reply for its repeats; returns it.
local function once_keep(key, reply)
  redis.call('SET', key, cjson.encode(reply), 'PX', ONCE_TTL_MS)
  return reply
end
