-- Append messages to a branch and record a turn, checking the fence; a turn that
-- already has a record is committed once only ('committed', nothing written).
-- Preludes: state_branches.
-- ARGV: branch, fence ('' unfenced), turn id ('' none), turn record JSON, now,
--   committed elsewhere ('1': another session has the turn's record), keep the
--   checkpoint ('1': the caller keeps the turn's steps elsewhere), the summaries
--   among the messages (20 digits each: the message's index from 1, its summary_of;
--   '' none), messages...
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
local n = #ARGV - 8
if n > 0 then
  local kv = {}
  for i = 1, n do
    kv[#kv + 1] = b .. '|' .. (len + i)
    kv[#kv + 1] = ARGV[8 + i]
  end
  hset_chunked(KEYS[3], kv)
  redis.call('HSET', KEYS[2], 'l:' .. b, len + n)
end
if ARGV[8] ~= '' then
  -- The branch's list of summaries (see state_history), for a turn's read to start at.
  local marks = {redis.call('HGET', KEYS[2], 's:' .. b) or ''}
  for k = 1, #ARGV[8], 20 do
    local at = len + tonumber(string.sub(ARGV[8], k, k + 9))
    marks[#marks + 1] = string.format('%010d', at) .. string.sub(ARGV[8], k + 10, k + 19)
  end
  redis.call('HSET', KEYS[2], 's:' .. b, table.concat(marks))
end
if ARGV[3] ~= '' then
  redis.call('HSET', KEYS[4], ARGV[3], ARGV[4])
  if ARGV[7] ~= '1' then
    redis.call('HDEL', KEYS[5], ARGV[3]) -- the turn's checkpoint: its steps are in now
  end
end
redis.call('HSET', KEYS[1], 'updated_at', ARGV[5])
return {'ok', b, tostring(len)}
