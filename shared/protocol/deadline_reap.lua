-- The sessions whose deadline passed, each pushed one retry period on so that
-- one reaper (not all of them) re-dispatches it.
-- Preludes: now_ms, deadlines.
-- KEYS: deadlines; ARGV: limit, retry_ms
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
for _, sid in ipairs(due) do
  deadline_set(KEYS[1], sid, now + tonumber(ARGV[2]))
end
return due
