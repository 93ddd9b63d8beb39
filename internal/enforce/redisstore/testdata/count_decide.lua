-- count_decide.lua counts the Lua VM instructions decide.lua runs per
-- decision, on a fake Redis (a table of hashes; its own instructions are not
-- counted), for batches of 32 decisions over 1,000 subjects with the
-- benchmarks' layers (benchLayers in bench_test.go), after every subject's
-- state is written: the steady state BenchmarkRedisScriptBatch times. A
-- count is free of the machine's load, unlike a time, so it compares two
-- versions of the script exactly; what it leaves out is Redis's side (the
-- calls, converting their arguments and replies, parsing strings).
--
--   cd internal/enforce/redisstore
--   lua5.1 testdata/count_decide.lua scripts/record.lua,scripts/decide.lua [layers] [calls] [count|profile|dump|time]
--
-- The script is its files, comma-separated, run as one text: the store
-- sends record.lua ahead of decide.lua's body (scripts.go); a former
-- version kept whole (testdata/decide_main.lua) is one file.
-- (apt-get install lua5.1: Redis runs Lua 5.1.) profile prints the
-- instructions per decision of each line of the script, busiest first;
-- dump prints one call's reply; time times the Lua alone (os.clock).
local path, layers, calls, mode = arg[1], tonumber(arg[2] or 3), tonumber(arg[3] or 50), arg[4] or 'count'
local PROFILE = mode == 'profile'
if PROFILE then mode = 'count' end
local src = ''
for file in string.gmatch(path, '[^,]+') do src = src .. assert(io.open(file)):read('*a') end
local chunk = assert(loadstring(src, 'decide'))
local db = {}
local ncalls = {}
local function fmt(v)
  if type(v) == 'number' then return string.format('%.17g', v) end
  return v
end
redis = {}
local count = 0
local inner
redis.call = function(cmd, key, ...)
  local c0 = count
  local r = inner(cmd, key, ...)
  count = c0
  return r
end
inner = function(cmd, key, ...)
  ncalls[cmd] = (ncalls[cmd] or 0) + 1
  local a = {...}
  if cmd == 'HMGET' then
    local h = db[key] or {}
    local r = {}
    for i = 1, #a do r[i] = h[a[i]] or false end
    return r
  elseif cmd == 'HSET' then
    local h = db[key] or {}
    db[key] = h
    for i = 1, #a, 2 do h[fmt(a[i])] = fmt(a[i + 1]) end
    return 1
  elseif cmd == 'HGET' then
    local h = db[key] or {}
    return h[fmt(a[1])] or false
  elseif cmd == 'HKEYS' then
    local r = {}
    for f in pairs(db[key] or {}) do r[#r + 1] = f end
    return r
  elseif cmd == 'HDEL' or cmd == 'PEXPIRE' then
    return 1
  elseif cmd == 'TIME' then
    return {'1764632000', '123456'}
  end
  error('cmd ' .. cmd)
end
redis.error_reply = function(s) return {err = s} end
-- struct, which Redis's Lua has and lua5.1 lacks: the numbers' %.17g
-- texts stand in for packed doubles, their instructions not counted
struct = {}
struct.pack = function(_, ...)
  local c0 = count
  local t = {...}
  for i = 1, #t do t[i] = string.format('%.17g', t[i]) end
  local r = table.concat(t, ' ')
  count = c0
  return r
end
struct.unpack = function(_, r)
  local c0 = count
  local t = {}
  for w in string.gmatch(r, '%S+') do t[#t + 1] = tonumber(w) end
  count = c0
  return unpack(t)
end
local L = {
  {'tb', 'tb', 1000000, 3600000000, 1000000000000, 1, 'tb:3600000000:1000000:1000000000000', 0},
  {'fw', 'fw', 1000000000000, 60000000, 0, 1, 'fw:60000000:1000000000000:0', 0},
  {'swc', 'swc', 1000000000000, 60000000, 0, 1, 'swc:60000000:1000000000000:0', 0},
}
local now = 1764632000123456
local function args(t)
  local A = {tostring(t), tostring(layers)}
  for j = 1, layers do for _, x in ipairs(L[j]) do A[#A + 1] = tostring(x) end end
  A[#A + 1] = 'u'; A[#A + 1] = 'a'; A[#A + 1] = tostring(layers)
  for j = 1, layers do A[#A + 1] = tostring(j) end
  return A
end
local batch = 32
local subj = 0
local function run(t)
  KEYS = {}
  for i = 1, batch do subj = (subj + 1) % 1000; KEYS[i] = 'p:{key:' .. subj .. '}' end
  ARGV = args(t)
  return chunk()
end
-- warm: every subject's state
for c = 1, 1000 / batch + 1 do run(now + c * 37) end
local lines = {}
local getinfo = debug.getinfo
local function hook()
  count = count + 1
  if PROFILE then
    local i = getinfo(2, 'Sl')
    if i and i.short_src == '[string "decide"]' then lines[i.currentline] = (lines[i.currentline] or 0) + 1 end
  end
end
ncalls = {}
if mode == 'count' then
  debug.sethook(hook, '', 1)
  for c = 1, calls do run(now + 100000 + c * 37) end
  debug.sethook()
  print(string.format('%s layers=%d instr/decision=%.1f', path, layers, count / (calls * batch)))
  if PROFILE then
    local t = {}
    for l, c in pairs(lines) do t[#t + 1] = {l, c} end
    table.sort(t, function(a, b) return a[2] > b[2] end)
    for i = 1, math.min(#t, 200) do print(string.format('%5d %7.2f', t[i][1], t[i][2] / (calls * batch))) end
  end
  for k, v in pairs(ncalls) do io.write(k, '=', string.format('%.2f', v / (calls * batch)), ' ') end
  print()
elseif mode == 'dump' then
  local r = run(now + 999)
  for i = 1, math.min(#r, 40) do io.write(tostring(r[i]), ' ') end
  print()
else
  local t0 = os.clock()
  for c = 1, calls do run(now + 100000 + c * 37) end
  print(string.format('%s layers=%d us/decision=%.3f', path, layers, (os.clock() - t0) * 1e6 / (calls * batch)))
end
