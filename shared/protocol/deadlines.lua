-- Prelude: the only code that writes the session deadline set (keys.lease_deadlines:
-- session id -> the server ms at which the reaper looks at the session). Scripts that
-- change a session and its deadline together include this file, so both change in one
-- atomic call; deadlines.py documents the set (docs/architecture.md, "Session protocol").

-- Set the deadline, whatever it was: a lease taken or renewed, a reaper's retry.
local function deadline_set(set, sid, at)
  redis.call('ZADD', set, at, sid)
end

-- Set it only if the session has none: a submit leaves a lease holder's deadline be.
local function deadline_add(set, sid, at)
  redis.call('ZADD', set, 'NX', at, sid)
end

-- Set it unless it is already sooner: never pushes an earlier deadline later.
local function deadline_no_later(set, sid, at)
  redis.call('ZADD', set, 'LT', at, sid)
  redis.call('ZADD', set, 'NX', at, sid)
end

-- Drop it; returns 1 if there was one.
local function deadline_clear(set, sid)
  return redis.call('ZREM', set, sid)
end
