-- Cut a branch after a sequence. A child forked inside the cut tail gets the
-- messages it inherits copied into it first, so its history does not change.
-- Preludes: state_branches.
-- ARGV: branch, sequence.
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local b = resolve(ARGV[1])
local len = redis.call('HGET', KEYS[2], 'l:' .. b)
if not len then return 0 end
len = tonumber(len)
local cut = math.max(tonumber(ARGV[2]), tonumber(redis.call('HGET', KEYS[2], 'f:' .. b)))
if len <= cut then return 0 end
local all = redis.call('HGETALL', KEYS[2])
for i = 1, #all, 2 do
  if string.sub(all[i], 1, 2) == 'p:' and all[i + 1] == b then
    local child = string.sub(all[i], 3)
    local cf = tonumber(redis.call('HGET', KEYS[2], 'f:' .. child))
    if cf > cut then
      for s = cut + 1, cf do
        local v = redis.call('HGET', KEYS[3], b .. '|' .. s)
        if v then redis.call('HSET', KEYS[3], child .. '|' .. s, v) end
      end
      redis.call('HSET', KEYS[2], 'f:' .. child, cut)
    end
  end
end
for s = cut + 1, len do redis.call('HDEL', KEYS[3], b .. '|' .. s) end
redis.call('HSET', KEYS[2], 'l:' .. b, cut)
return len - cut
