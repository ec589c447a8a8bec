-- Prelude of the Redis state store: a branch's history, message JSON oldest first
-- (the branch's chain up to the trunk, each ancestor capped at the fork point below
-- it, as base.view_ranges does). Needs KEYS[2] the branches, KEYS[3] the messages.
-- A branch's own summaries are listed in the branches hash's field s:<b>, oldest
-- first, 20 digits each: the summary's sequence, then its summary_of (10 and 10).
local function ranges_of(b)
  local chain = {}
  local cur = b
  while cur do
    local f = redis.call('HGET', KEYS[2], 'f:' .. cur)
    if not f then break end
    chain[#chain + 1] = {cur, tonumber(f), tonumber(redis.call('HGET', KEYS[2], 'l:' .. cur))}
    cur = redis.call('HGET', KEYS[2], 'p:' .. cur)
  end
  -- The branch first, then its ancestors: {branch, after, upto} of the messages seen.
  local ranges = {}
  local cap = nil
  for i = 1, #chain do
    local bid, fork, len = chain[i][1], chain[i][2], chain[i][3]
    local hi = len
    if cap ~= nil and cap < hi then hi = cap end
    if hi > fork then ranges[#ranges + 1] = {bid, fork, hi} end
    if cap == nil or fork < cap then cap = fork end
  end
  return ranges
end
-- What the latest summary the ranges see stands for (0: none): from the newest
-- entry of the deepest range back, so it reads a few entries, never the messages.
local function summary_floor(ranges)
  for i = 1, #ranges do
    local r = ranges[i]
    local marks = redis.call('HGET', KEYS[2], 's:' .. r[1])
    if marks then
      for k = #marks - 19, 1, -20 do
        local at = tonumber(string.sub(marks, k, k + 9))
        if at <= r[2] then break end
        -- A summary_of past the summary itself would read not even the summary.
        if at <= r[3] then return math.min(tonumber(string.sub(marks, k + 10, k + 19)), at - 1) end
      end
    end
  end
  return 0
end
-- The messages after sequence ``floor`` the ranges see, oldest first.
local function read_ranges(ranges, floor)
  local out = {}
  for i = #ranges, 1, -1 do
    local r = ranges[i]
    local lo = math.max(r[2], floor)
    for first = lo + 1, r[3], 1000 do
      local fields = {}
      for s = first, math.min(first + 999, r[3]) do fields[#fields + 1] = r[1] .. '|' .. s end
      local values = redis.call('HMGET', KEYS[3], unpack(fields))
      for j = 1, #values do out[#out + 1] = values[j] end
    end
  end
  return out
end
local function history(b)
  return read_ranges(ranges_of(b), 0)
end
