-- record.lua: the state records decide.lua, adjust.lua and refund.lua read
-- and write, and the packing they are written with. Redis's EVAL has no
-- include, so the store sends each of those scripts as this text followed
-- by the script's body (scripts.go): one script, one SHA, whose body sees
-- the locals below as its own.
--
-- A limit whose state hash field is F keeps its state in the field
-- F..'@'..<its figures> ('code:window:limit:burst'), a record of packed
-- doubles, by algorithm code:
--   a token or leaky bucket ('tb', 'lb', 'lq')  tat, e
--   a fixed window ('fw')                       window index, count, e
--   a quota ('qd', 'qm', 'qy')                  period start, count, e
--   a sliding window counter ('swc')            window index, current and
--                                               previous counts, e
-- where e is the record's TTL mark: the TTL (us) the hash was given when the
-- record was last written (decide.lua says how it is used). TWO are the
-- codes whose record is an index or start and a count.
local TWO = {fw = true, qd = true, qm = true, qy = true}

-- Records are packed little-endian doubles (struct, in Redis's Lua), which
-- hold every state exactly and cost neither strtod to read nor the %.17g a
-- Lua number costs redis.call to write. miniredis, the tests' fallback
-- without a Redis, has no struct: there records are the numbers' %.17g
-- texts, space-separated. struct_lib is nil there.
local struct_lib = rawget(_G, 'struct')
local pack, sunpack
if struct_lib then
  pack, sunpack = struct_lib.pack, struct_lib.unpack
else
  local tunpack = unpack
  pack = function(_, ...)
    local t = {...}
    for i = 1, #t do t[i] = string.format('%.17g', t[i]) end
    return table.concat(t, ' ')
  end
  sunpack = function(_, r)
    local t = {}
    for w in string.gmatch(r, '%S+') do t[#t + 1] = tonumber(w) end
    return tunpack(t)
  end
end

-- decode returns the state a, y, z and the TTL mark e of record r of
-- algorithm code: a bucket's tat (y and z nil), a fixed window's or a
-- quota's index or start and count (z nil), a sliding counter's index and
-- current and previous counts. (decide.lua inlines it where it reads a
-- record per request: a Lua call per limit.)
local function decode(code, r)
  if code == 'swc' then
    local a, y, z, e = sunpack('<dddd', r)
    return a, y, z, e
  elseif TWO[code] then
    local a, y, e = sunpack('<ddd', r)
    return a, y, nil, e
  end
  local a, e = sunpack('<dd', r)
  return a, nil, nil, e
end

-- encode packs a record of algorithm code of state x, y, z and TTL mark e
-- (y and z unused where decode returns nil for them).
local function encode(code, x, y, z, e)
  if code == 'swc' then
    return pack('<dddd', x, y, z, e)
  elseif TWO[code] then
    return pack('<ddd', x, y, e)
  end
  return pack('<dd', x, e)
end

-- drop_fields deletes from hash K the fields in which limit field f kept
-- its state in the layout before records (F, F:+, F:-, F:#, and the hash's
-- 'e'; testdata/decide_main.lua), once a record of f replaces them.
local function drop_fields(K, f)
  redis.call('HDEL', K, f, f .. ':+', f .. ':-', f .. ':#', 'e')
end
