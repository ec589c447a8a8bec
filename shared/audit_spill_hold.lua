-- Keep audit rows the database could not take, at most a cap of them (the oldest go).
-- KEYS: the list; ARGV: the cap, then the rows. Returns the length before the trim.
local length = redis.call('RPUSH', KEYS[1], unpack(ARGV, 2))
local cap = tonumber(ARGV[1])
if length > cap then redis.call('LTRIM', KEYS[1], -cap, -1) end
return length
