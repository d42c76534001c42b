-- ARGV: entry ids. By id alone: whoever acks has recorded the outcome.
local count = 0
for _, eid in ipairs(ARGV) do
  local m = entry(eid)
  if m ~= nil then
    forget(m)
    count = count + 1
  end
  drop(eid)
end
return count
