-- Start a branch from a point of another.
-- Preludes: state_branches.
-- ARGV: source branch, fork point, new branch id, now, activate ('1'/'0').
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
