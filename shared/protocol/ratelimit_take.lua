-- Take one request and its estimated tokens from a model's bucket, or say how long to wait.
-- Preludes: now_ms, ratelimit_bucket.
-- KEYS: bucket; ARGV: 1-4 the bucket's rates and capacities, 5 the request's tokens.
-- Returns {0, ''} when taken, else {ms to wait, 'requests' | 'tokens' | 'provider'}
-- with nothing taken: the caller asks again after the wait.
if hold > now then return {math.ceil(hold - now), 'provider'} end
local tokens = tonumber(ARGV[5])
local wait, why = 0, ''
if rrate > 0 and r < 1 then wait, why = (1 - r) / rrate, 'requests' end
if trate > 0 then
  -- A full bucket lets a request bigger than itself through (the debt waits after it).
  local need = math.min(tokens, tcap)
  if t < need and (need - t) / trate > wait then wait, why = (need - t) / trate, 'tokens' end
end
if wait > 0 then return {math.max(1, math.ceil(wait)), why} end
if rrate > 0 then r = r - 1 end
if trate > 0 then t = t - tokens end
bucket_save()
return {0, ''}
