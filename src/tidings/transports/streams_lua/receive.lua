-- ARGV: now, visible until, max messages, most delayed messages to move in, then the
-- lanes to take from, in order. Lane by lane in the order asked, as long as there is
-- room, from each lane's own stream (its messages that name no group). Answers first
-- where it stopped: 0 when it walked every lane it could, else the position (from 1)
-- among the lanes asked of a lane left with room whose groups hold messages (the
-- caller takes those in turn, then asks again for the lanes after it); then per
-- message what hand_out says.
local now, until_at, max, moves = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
move_due(now, moves)
local taken = {}
local stopped = 0
for i = 5, #ARGV do
  if #taken >= max then break end
  local lane = lane_of(ARGV[i])
  take_from(lane, '', max - #taken, now, taken)
  if #taken < max and redis.call('ZCARD', REG[lane + 1]) > 0 then
    stopped = i - 4
    break
  end
end
return hand_out(taken, until_at, stopped)
