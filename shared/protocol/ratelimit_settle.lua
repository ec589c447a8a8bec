-- After a call: correct the tokens taken by what the call really used, and tighten the
-- bucket with what the provider says is left of its own budget (x-ratelimit-* headers).
-- Preludes: now_ms, ratelimit_bucket.
-- KEYS: bucket; ARGV: 1-4 as for take, 5 tokens used beyond the estimate (negative:
-- fewer, given back), 6 requests the provider has left ('' unknown), 7 ms until they
-- reset, 8 tokens it has left ('' unknown), 9 ms until they reset.
if trate > 0 then t = math.min(tcap, t - tonumber(ARGV[5])) end
if ARGV[6] ~= '' then
  local left = tonumber(ARGV[6])
  if rrate > 0 then r = math.min(r, left) end
  if left < 1 then hold = math.max(hold, now + tonumber(ARGV[7])) end
end
if ARGV[8] ~= '' then
  local left = tonumber(ARGV[8])
  if trate > 0 then t = math.min(t, left) end
  if left < 1 then hold = math.max(hold, now + tonumber(ARGV[9])) end
end
bucket_save()
return 1
