-- adjust.lua: a quota's count for the current period changed outside a
-- decision, atomically with the decisions of decide.lua, whose record of
-- the limit it writes (record.lua, which Redis runs ahead of this body,
-- holds the records' layout and their decode and encode).
--
-- KEYS[1]  the subject's state hash
-- ARGV[1]  the limit's field F, ARGV[2] the current period's start (us),
-- ARGV[3]  'reset' (the count goes to 0) or a number of units granted
--          (taken off the count, so it may go below 0; they go with the
--          period), ARGV[4] the limit's figures, ARGV[5] when the hash
--          must live until (us), ARGV[6] now (us)
-- Requires Redis >= 7.0 (PEXPIRE GT and NX).
local K, f, s, fig = KEYS[1], ARGV[1], tonumber(ARGV[2]), ARGV[4]
local rf = f .. '@' .. fig
local code = string.match(fig, '^(%a+):')
local count, e, fresh = 0, 0, false
local r = redis.call('HGET', K, rf)
if r then
  local a, y, _
  a, y, _, e = decode(code, r)
  if a == s then count = y end
else
  -- a record of other figures, or the layout before records: only a count
  -- of these figures and this period stands, as the memory store's adjust
  -- requires; what was there is deleted (decide.lua's load)
  fresh = true
  local pre = f .. '@'
  for _, key in ipairs(redis.call('HKEYS', K)) do
    if string.sub(key, 1, #pre) == pre then redis.call('HDEL', K, key) end
  end
  local v = redis.call('HMGET', K, f .. ':#', f, f .. ':+')
  if v[1] == fig and tonumber(v[2]) == s then count = tonumber(v[3]) or 0 end
  if v[2] then drop_fields(K, f) end
end
if ARGV[3] == 'reset' then
  count = 0
else
  count = count - tonumber(ARGV[3])
end
local until_ = tonumber(ARGV[5])
local move = until_ > e
if move then e = until_ end
redis.call('HSET', K, rf, encode(code, s, count, nil, e))
if move then
  local ms = math.max(1, math.ceil((until_ - tonumber(ARGV[6])) / 1000))
  if not (fresh and redis.call('PEXPIRE', K, ms, 'NX') == 1) then
    redis.call('PEXPIRE', K, ms, 'GT')
  end
end
return count
