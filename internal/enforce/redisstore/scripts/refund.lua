-- refund.lua: units a decision consumed given back (a lease's unused part,
-- a request whose cost was settled lower), atomically with decide.lua,
-- whose records it rewrites (record.lua, which Redis runs ahead of this
-- body, holds their layout and their decode and encode). It mirrors
-- enforce.RefundState rule for rule.
--
-- KEYS[1]  the subject's state hash
-- ARGV[1]  now in microseconds, or '' to read Redis TIME
-- then per limit, five values from ARGV[p]: the record's name F@<figures>,
-- its algorithm code, the units to give back, the window index or period
-- start the decision fell in (enforce.RefundID), and a bucket's interval
-- (us per unit). A record that is missing, of other figures, or of
-- another window or period is left alone. Returns the number of records
-- changed.
local K = KEYS[1]
local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
-- a count goes no lower than zero, or than itself when already below
local function less(c, u)
  return math.max(c - u, math.min(c, 0))
end
local changed = 0
for p = 2, #ARGV, 5 do
  local rf, code, u, id = ARGV[p], ARGV[p + 1], tonumber(ARGV[p + 2]), tonumber(ARGV[p + 3])
  local r = redis.call('HGET', K, rf)
  if r and u > 0 then
    local a, y, z, e = decode(code, r)
    if code == 'swc' then
      if a == id then
        y = less(y, u)
      elseif a == id + 1 then
        z = less(z, u)
      else
        a = nil
      end
    elseif TWO[code] then
      if a == id then y = less(y, u) else a = nil end
    elseif code == 'tb' or code == 'lb' then
      if a > now then a = math.max(a - u * tonumber(ARGV[p + 4]), now) else a = nil end
    else
      a = nil
    end
    if a then
      redis.call('HSET', K, rf, encode(code, a, y, z, e))
      changed = changed + 1
    end
  end
end
return changed
