-- Delete a session's state: every key of it.
-- KEYS: the state hash, branches, messages, turn records, steps, metadata.
-- Returns its creation time ('' if it had none), then the turn ids it had records
-- of: the listing's entry and the turns' index keys are not in the session's slot,
-- the caller deletes them.
local created = redis.call('HGET', KEYS[1], 'created_at') or ''
local turns = redis.call('HKEYS', KEYS[4])
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6])
table.insert(turns, 1, created)
return turns
