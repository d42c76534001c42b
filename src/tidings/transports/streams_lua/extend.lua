-- ARGV: visible until, then (entry id, token) per message.
local count = 0
for i = 2, #ARGV, 2 do
  if held(ARGV[i], ARGV[i + 1]) ~= nil then
    redis.call('ZADD', V, 'XX', ARGV[1], ARGV[i])
    count = count + 1
  end
end
return count
