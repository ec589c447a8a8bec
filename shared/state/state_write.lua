-- Append messages to a branch and record a turn, checking the fence.
-- Preludes: state_branches.
-- ARGV: branch, fence ('' unfenced), turn id ('' none), turn record JSON, now, messages...
if redis.call('EXISTS', KEYS[1]) == 0 then return {'no_session'} end
local b = resolve(ARGV[1])
local len = redis.call('HGET', KEYS[2], 'l:' .. b)
if not len then return {'no_branch', b} end
if ARGV[2] ~= '' then
  local stored = tonumber(redis.call('HGET', KEYS[1], 'fence'))
  local fence = tonumber(ARGV[2])
  if stored > fence then return {'stale', tostring(stored)} end
  if fence > stored then redis.call('HSET', KEYS[1], 'fence', ARGV[2]) end
end
len = tonumber(len)
local n = #ARGV - 5
if n > 0 then
  local kv = {}
  for i = 1, n do
    kv[#kv + 1] = b .. '|' .. (len + i)
    kv[#kv + 1] = ARGV[5 + i]
  end
  hset_chunked(KEYS[3], kv)
  redis.call('HSET', KEYS[2], 'l:' .. b, len + n)
end
if ARGV[3] ~= '' then redis.call('HSET', KEYS[4], ARGV[3], ARGV[4]) end
redis.call('HSET', KEYS[1], 'updated_at', ARGV[5])
return {'ok', b, tostring(len)}
