-- Prelude: read the running slot, "<attempt>|<lost>|<turn_id>|<TurnRequest JSON>".
local function parse_running(value)
  local a, l, rest = string.match(value, '^(%d+)|(-?%d+)|(.*)$')
  local sep = string.find(rest, '|', 1, true)
  return tonumber(a), tonumber(l), string.sub(rest, 1, sep - 1), string.sub(rest, sep + 1)
end

-- A turn id the slot can hold: 't_' then 1-126 of [A-Za-z0-9_-], so never a '|'.
-- The same rule as TURN_ID_RE in shared/turns.py (tests/test_protocol.py checks both agree).
local function valid_turn_id(value)
  return type(value) == 'string' and #value <= 128
    and string.find(value, '^t_[A-Za-z0-9_%-]+$') ~= nil
end
