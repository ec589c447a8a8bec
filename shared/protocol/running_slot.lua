-- Prelude: read the running slot, "<attempt>|<lost>|<turn_id>|<TurnRequest JSON>".
local function parse_running(value)
  local a, l, rest = string.match(value, '^(%d+)|(-?%d+)|(.*)$')
  local sep = string.find(rest, '|', 1, true)
  return tonumber(a), tonumber(l), string.sub(rest, 1, sep - 1), string.sub(rest, sep + 1)
end
