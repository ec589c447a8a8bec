-- Append messages to a branch and record a turn, checking the fence; a turn that
-- already has a record is committed once only ('committed', nothing written).
-- Preludes: state_branches.
-- ARGV: branch, fence ('' unfenced), turn id ('' none), turn record JSON, now,
--   committed elsewhere ('1': another session has the turn's record), messages...
if redis.call('EXISTS', KEYS[1]) == 0 then return {'no_session'} end
local b = resolve(ARGV[1])
local len = redis.call('HGET', KEYS[2], 'l:' .. b)
if not len then return {'no_branch', b} end
local stored = tonumber(redis.call('HGET', KEYS[1], 'fence'))
local fence = tonumber(ARGV[2]) -- nil: unfenced
if fence and stored > fence then return {'stale', tostring(stored)} end
if ARGV[3] ~= '' and (ARGV[6] == '1' or redis.call('HEXISTS', KEYS[4], ARGV[3]) == 1) then
  return {'committed'}
end
if fence and fence > stored then redis.call('HSET', KEYS[1], 'fence', ARGV[2]) end
len = tonumber(len)
local n = #ARGV - 6
if n > 0 then
  local kv = {}
  for i = 1, n do
    kv[#kv + 1] = b .. '|' .. (len + i)
    kv[#kv + 1] = ARGV[6 + i]
  end
  hset_chunked(KEYS[3], kv)
  redis.call('HSET', KEYS[2], 'l:' .. b, len + n)
end
if ARGV[3] ~= '' then
  redis.call('HSET', KEYS[4], ARGV[3], ARGV[4])
  redis.call('HDEL', KEYS[5], ARGV[3]) -- the turn's checkpoint: its steps are in now
end
redis.call('HSET', KEYS[1], 'updated_at', ARGV[5])
return {'ok', b, tostring(len)}
