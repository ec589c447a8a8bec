-- Prelude of the Redis state store: resolve a branch name ('' for the active one)
-- and HSET many fields without overflowing Lua's stack.
local function resolve(name)
  if name == '' then return redis.call('HGET', KEYS[1], 'active') end
  return name
end
local function hset_chunked(key, kv)
  for i = 1, #kv, 1000 do
    redis.call('HSET', key, unpack(kv, i, math.min(i + 999, #kv)))
  end
end
