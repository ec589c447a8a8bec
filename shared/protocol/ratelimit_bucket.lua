-- Prelude: a model's token bucket (ratelimit.py), refilled up to `now`.
-- Needs now_ms first. KEYS[1]: the bucket; ARGV[1..4]: requests per ms, request
-- capacity, tokens per ms, token capacity (a rate of 0: that budget is not limited).
-- Levels may go below zero: a request bigger than the bucket borrows from the future.
local rrate, rcap = tonumber(ARGV[1]), tonumber(ARGV[2])
local trate, tcap = tonumber(ARGV[3]), tonumber(ARGV[4])
local state = redis.call('HMGET', KEYS[1], 'r', 't', 'at', 'hold')
local r = tonumber(state[1]) or rcap
local t = tonumber(state[2]) or tcap
local elapsed = math.max(0, now - (tonumber(state[3]) or now))
local hold = tonumber(state[4]) or 0
r = math.min(rcap, r + elapsed * rrate)
t = math.min(tcap, t + elapsed * trate)

local function bucket_save()
  redis.call('HSET', KEYS[1], 'r', tostring(r), 't', tostring(t), 'at', now, 'hold', hold)
  -- A bucket left alone refills; once full it is the same as no bucket, so it may go.
  local refill = math.max(0, hold - now)
  if rrate > 0 then refill = math.max(refill, (rcap - r) / rrate) end
  if trate > 0 then refill = math.max(refill, (tcap - t) / trate) end
  redis.call('PEXPIRE', KEYS[1], 60000 + math.ceil(refill))
end
