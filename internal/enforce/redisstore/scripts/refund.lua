-- refund.lua: units a decision consumed given back (a lease's unused part,
-- a request whose cost was settled lower), atomically with decide.lua,
-- whose records it rewrites (see there for their layout). It mirrors
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
local TWO = {fw = true, qd = true, qm = true, qy = true}
-- a count goes no lower than zero, or than itself when already below
local function less(c, u)
  return math.max(c - u, math.min(c, 0))
end
local changed = 0
for p = 2, #ARGV, 5 do
  local rf, code, u, id = ARGV[p], ARGV[p + 1], tonumber(ARGV[p + 2]), tonumber(ARGV[p + 3])
  local r = redis.call('HGET', K, rf)
  if r and u > 0 then
    if code == 'swc' then
      local a, y, z, e = unpack('<dddd', r)
      if a == id then
        redis.call('HSET', K, rf, pack('<dddd', a, less(y, u), z, e))
        changed = changed + 1
      elseif a == id + 1 then
        redis.call('HSET', K, rf, pack('<dddd', a, y, less(z, u), e))
        changed = changed + 1
      end
    elseif TWO[code] then
      local a, y, e = unpack('<ddd', r)
      if a == id then
        redis.call('HSET', K, rf, pack('<ddd', a, less(y, u), e))
        changed = changed + 1
      end
    elseif code == 'tb' or code == 'lb' then
      local tat, e = unpack('<dd', r)
      if tat > now then
        redis.call('HSET', K, rf, pack('<dd', math.max(tat - u * tonumber(ARGV[p + 4]), now), e))
        changed = changed + 1
      end
    end
  end
end
return changed
