"""The Lua scripts of the Redis state store: each operation is one atomic script.

Per session (keys share the session's hash slot; see ``redis.py`` for the layout):
KEYS[1] the session hash, KEYS[2] the branches hash, KEYS[3] the messages hash,
KEYS[4] the turn records hash. A branch ``b`` is the fields ``p:b`` (parent),
``f:b`` (fork point), ``l:b`` (length: its last sequence) and ``c:b`` (created);
its own message ``n`` is the field ``b|n`` of the messages hash. Errors are
returned as ``{code, ...}`` for Python to raise, never as Lua errors, so that
nothing is half-written.
"""

from __future__ import annotations

# ARGV[1] is the branch, '' for the active one.
_RESOLVE = """
local function resolve(name)
  if name == '' then return redis.call('HGET', KEYS[1], 'active') end
  return name
end
local function hset_chunked(key, kv)
  for i = 1, #kv, 1000 do
    redis.call('HSET', key, unpack(kv, i, math.min(i + 999, #kv)))
  end
end
"""

ENSURE = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'v', ARGV[3], 'agent', ARGV[1], 'active', 'trunk',
             'fence', 0, 'created_at', ARGV[2], 'updated_at', ARGV[2])
  redis.call('HSET', KEYS[2], 'f:trunk', 0, 'l:trunk', 0, 'c:trunk', ARGV[2])
end
return redis.call('HMGET', KEYS[1], 'v', 'agent', 'active', 'fence', 'created_at')
"""

# ARGV: branch, fence ('' unfenced), turn id ('' none), turn record JSON, now, messages...
WRITE = (
    _RESOLVE
    + """
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
"""
)

# ARGV: branch. Returns the branch's whole history, message JSON oldest first.
READ = (
    _RESOLVE
    + """
local b = resolve(ARGV[1])
if not b then return {} end
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
"""
)

# ARGV: source branch, fork point, new branch id, now, activate ('1'/'0').
FORK = (
    _RESOLVE
    + """
if redis.call('EXISTS', KEYS[1]) == 0 then return {'no_session'} end
local src = resolve(ARGV[1])
local len = redis.call('HGET', KEYS[2], 'l:' .. src)
if not len then return {'no_branch', src} end
if tonumber(ARGV[2]) > tonumber(len) then return {'range', src, len} end
if redis.call('HEXISTS', KEYS[2], 'l:' .. ARGV[3]) == 1 then return {'exists', ARGV[3]} end
redis.call('HSET', KEYS[2], 'p:' .. ARGV[3], src, 'f:' .. ARGV[3], ARGV[2],
           'l:' .. ARGV[3], ARGV[2], 'c:' .. ARGV[3], ARGV[4])
if ARGV[5] == '1' then redis.call('HSET', KEYS[1], 'active', ARGV[3]) end
return {'ok', src}
"""
)

# ARGV: branch.
SWITCH = """
if redis.call('EXISTS', KEYS[1]) == 0 then return {'no_session'} end
if redis.call('HEXISTS', KEYS[2], 'l:' .. ARGV[1]) == 0 then return {'no_branch', ARGV[1]} end
redis.call('HSET', KEYS[1], 'active', ARGV[1])
return {'ok'}
"""

# ARGV: branch, sequence. A child forked inside the cut tail gets the messages it
# inherits copied into it first, so its history does not change.
TRUNCATE = (
    _RESOLVE
    + """
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
"""
)

# ARGV: fence.
CLAIM = """
if redis.call('EXISTS', KEYS[1]) == 0 then return {'ok'} end
local stored = tonumber(redis.call('HGET', KEYS[1], 'fence'))
if stored > tonumber(ARGV[1]) then return {'stale', tostring(stored)} end
redis.call('HSET', KEYS[1], 'fence', ARGV[1])
return {'ok'}
"""
