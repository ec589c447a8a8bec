-- Prelude: `now`, the Redis server's clock in ms, so that workers whose clocks
-- are skewed agree on deadlines.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
