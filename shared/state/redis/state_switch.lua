-- Make a branch the active one.
-- ARGV: branch.
if redis.call('EXISTS', KEYS[1]) == 0 then return {'no_session'} end
if redis.call('HEXISTS', KEYS[2], 'l:' .. ARGV[1]) == 0 then return {'no_branch', ARGV[1]} end
redis.call('HSET', KEYS[1], 'active', ARGV[1])
return {'ok'}
