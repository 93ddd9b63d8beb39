-- adjust.lua: a quota's count for the current period changed outside a
-- decision, atomically with the decisions of decide.lua, whose record of
-- the limit it writes (see there).
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
local tunpack = unpack
local pack, unpack
local lib = rawget(_G, 'struct')
if lib then
  pack, unpack = lib.pack, lib.unpack
else
  -- miniredis, the tests' fallback, has no struct (see decide.lua)
  pack = function(_, ...)
    local t = {...}
    for i = 1, #t do t[i] = string.format('%.17g', t[i]) end
    return table.concat(t, ' ')
  end
  unpack = function(_, r)
    local t = {}
    for w in string.gmatch(r, '%S+') do t[#t + 1] = tonumber(w) end
    return tunpack(t)
  end
end
local count, e, fresh = 0, 0, false
local r = redis.call('HGET', K, rf)
if r then
  local a, y
  a, y, e = unpack('<ddd', r)
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
  if v[2] then redis.call('HDEL', K, f, f .. ':+', f .. ':-', f .. ':#', 'e') end
end
if ARGV[3] == 'reset' then
  count = 0
else
  count = count - tonumber(ARGV[3])
end
local until_ = tonumber(ARGV[5])
local move = until_ > e
if move then e = until_ end
redis.call('HSET', K, rf, pack('<ddd', s, count, e))
if move then
  local ms = math.max(1, math.ceil((until_ - tonumber(ARGV[6])) / 1000))
  if not (fresh and redis.call('PEXPIRE', K, ms, 'NX') == 1) then
    redis.call('PEXPIRE', K, ms, 'GT')
  end
end
return count
