-- Prelude of the Redis state store: a branch's whole history, message JSON oldest
-- first (the branch's chain up to the trunk, each ancestor capped at the fork point
-- below it, as base.view_ranges does). Needs KEYS[2] the branches, KEYS[3] the messages.
local function history(b)
  local chain = {}
  local cur = b
  while cur do
    local f = redis.call('HGET', KEYS[2], 'f:' .. cur)
    if not f then break end
    chain[#chain + 1] = {cur, tonumber(f), tonumber(redis.call('HGET', KEYS[2], 'l:' .. cur))}
    cur = redis.call('HGET', KEYS[2], 'p:' .. cur)
  end
  local ranges = {}
  local cap = nil
  for i = 1, #chain do
    local bid, fork, len = chain[i][1], chain[i][2], chain[i][3]
    local hi = len
    if cap ~= nil and cap < hi then hi = cap end
    if hi > fork then ranges[#ranges + 1] = {bid, fork, hi} end
    if cap == nil or fork < cap then cap = fork end
  end
  local out = {}
  for i = #ranges, 1, -1 do
    local r = ranges[i]
    for lo = r[2] + 1, r[3], 1000 do
      local fields = {}
      for s = lo, math.min(lo + 999, r[3]) do fields[#fields + 1] = r[1] .. '|' .. s end
      local values = redis.call('HMGET', KEYS[3], unpack(fields))
      for j = 1, #values do out[#out + 1] = values[j] end
    end
  end
  return out
end
