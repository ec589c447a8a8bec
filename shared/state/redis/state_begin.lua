-- Start a turn: create the session (its trunk) unless it exists, record the fence
-- (an older one than stored is refused, nothing written) and read the branch from
-- the first message its latest summary does not stand for, unless the session is
-- another agent's (the caller refuses the turn).
-- Preludes: state_branches, state_history.
-- KEYS: the state hash, the branches, the messages.
-- ARGV: agent, now, record version, fence ('' unfenced), branch ('' for the active one).
-- Returns {'stale', stored} or
-- {'ok', v, agent, active, fence, created_at, branch, floor, messages...}: the messages
-- are sequences floor+1 on.
local fence = tonumber(ARGV[4]) -- nil: unfenced
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'v', ARGV[3], 'agent', ARGV[1], 'active', 'trunk',
             'fence', fence and ARGV[4] or '0', 'created_at', ARGV[2], 'updated_at', ARGV[2])
  redis.call('HSET', KEYS[2], 'f:trunk', 0, 'l:trunk', 0, 'c:trunk', ARGV[2])
elseif fence then
  local stored = tonumber(redis.call('HGET', KEYS[1], 'fence'))
  if stored > fence then return {'stale', tostring(stored)} end
  redis.call('HSET', KEYS[1], 'fence', ARGV[4])
end
local row = redis.call('HMGET', KEYS[1], 'v', 'agent', 'active', 'fence', 'created_at')
local b = resolve(ARGV[5])
if row[2] ~= ARGV[1] then return {'ok', row[1], row[2], row[3], row[4], row[5], b, '0'} end
local ranges = ranges_of(b)
local floor = summary_floor(ranges)
local out = {'ok', row[1], row[2], row[3], row[4], row[5], b, tostring(floor)}
local messages = read_ranges(ranges, floor)
for i = 1, #messages do out[#out + 1] = messages[i] end
return out
