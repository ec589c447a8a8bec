-- Replace a session's todo list (delete it when empty), the lease fence checked in the
-- same call (todos.py).
-- KEYS: the session's state hash, its todos key
-- ARGV: the fence ('' unfenced), the list's JSON ('' to remove it)
-- Returns the stored token when it refuses, else nil.
local stored = tonumber(redis.call('HGET', KEYS[1], 'fence') or '')
local fence = tonumber(ARGV[1])
if fence and stored and stored > fence then return tostring(stored) end
if ARGV[2] == '' then redis.call('DEL', KEYS[2]) else redis.call('SET', KEYS[2], ARGV[2]) end
return nil
