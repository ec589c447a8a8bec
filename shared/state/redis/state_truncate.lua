-- Cut a branch after a sequence. A child forked inside the cut tail gets the
-- messages it inherits copied into it first (and their entries in the list of
-- summaries, see state_history), so its history does not change.
-- Preludes: state_branches.
-- ARGV: branch, sequence.
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local b = resolve(ARGV[1])
local len = redis.call('HGET', KEYS[2], 'l:' .. b)
if not len then return 0 end
len = tonumber(len)
local cut = math.max(tonumber(ARGV[2]), tonumber(redis.call('HGET', KEYS[2], 'f:' .. b)))
if len <= cut then return 0 end
local marks = redis.call('HGET', KEYS[2], 's:' .. b) or ''
-- The entries of the summaries at sequences lo+1..hi (marks are in sequence order).
local function marks_within(lo, hi)
  local kept = {}
  for k = 1, #marks, 20 do
    local at = tonumber(string.sub(marks, k, k + 9))
    if at > hi then break end
    if at > lo then kept[#kept + 1] = string.sub(marks, k, k + 19) end
  end
  return table.concat(kept)
end
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
      local inherited = marks_within(cut, cf)
      if inherited ~= '' then
        local own = redis.call('HGET', KEYS[2], 's:' .. child) or ''
        redis.call('HSET', KEYS[2], 's:' .. child, inherited .. own)
      end
    end
  end
end
for s = cut + 1, len do redis.call('HDEL', KEYS[3], b .. '|' .. s) end
redis.call('HSET', KEYS[2], 'l:' .. b, cut)
if marks ~= '' then
  local left = marks_within(-1, cut)
  if left == '' then
    redis.call('HDEL', KEYS[2], 's:' .. b)
  else
    redis.call('HSET', KEYS[2], 's:' .. b, left)
  end
end
return len - cut
