-- adjust.lua: a quota's count for the current period changed outside a
-- decision, atomically with the decisions of decide.lua, whose fields it
-- writes (see there).
--
-- KEYS[1]  the subject's state hash
-- ARGV[1]  the limit's field F, ARGV[2] the current period's start (us),
-- ARGV[3]  'reset' (the count goes to 0) or a number of units granted
--          (taken off the count, so it may go below 0; they go with the
--          period), ARGV[4] the limit's figures, ARGV[5] when the hash
--          must live until (us), ARGV[6] now (us)
local K, f, s = KEYS[1], ARGV[1], tonumber(ARGV[2])
local v = redis.call('HMGET', K, f, f .. ':+', f .. ':#', 'e')
local count = 0
if tonumber(v[1]) == s and v[3] == ARGV[4] then count = tonumber(v[2]) or 0 end
if ARGV[3] == 'reset' then
  count = 0
else
  count = count - tonumber(ARGV[3])
end
local until_ = tonumber(ARGV[5])
local e = tonumber(v[4]) or 0
if until_ > e then
  redis.call('HSET', K, f, s, f .. ':+', count, f .. ':#', ARGV[4], 'e', until_)
  redis.call('PEXPIRE', K, math.max(1, math.ceil((until_ - tonumber(ARGV[6])) / 1000)))
else
  redis.call('HSET', K, f, s, f .. ':+', count, f .. ':#', ARGV[4])
end
return count
