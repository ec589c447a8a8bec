-- The branch's whole history, message JSON oldest first.
-- Preludes: state_branches, state_history.
-- ARGV: branch ('' for the active one).
local b = resolve(ARGV[1])
if not b then return {} end
return history(b)
