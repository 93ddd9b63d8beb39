-- decide.lua: one atomic rate-limit decision over every limit of one request.
-- It mirrors algorithm.go operation for operation (integer microseconds, the
-- same float64 steps in the same order), so both stores agree exactly.
--
-- KEYS[2i-1]  state of limit i (hash, string or sorted set by algorithm)
-- KEYS[2i]    sliding log: its metadata hash; other algorithms repeat KEYS[2i-1]
-- KEYS[2n+1]  usage hash of the current 10-second bucket (only when ARGV[4] ~= '')
-- ARGV[1]     'a' consumes (Allow), 'p' only evaluates (Peek)
-- ARGV[2]     now in microseconds, or '' to read Redis TIME (tests set it)
-- ARGV[3]     n, the number of limits
-- ARGV[4]     usage field prefix (route .. '\0'), or '' when usage is off
-- ARGV[5]     usage hash TTL in seconds
-- ARGV[6+6(i-1)..11+6(i-1)]  limit i: algorithm code, limit, window us,
--             burst, cost, queue ('1' in queue mode)
-- Returns {allowed, delay us, then per limit: allowed, remaining, reset us,
-- retry us}. Nothing is written unless every limit admits (all or nothing),
-- except usage counters; every key written gets a TTL here.
--
-- Redis runs this body on every call, so it avoids tables on the one-limit
-- path and calls Redis as few times as the algorithm allows.

local consume = ARGV[1] == 'a'
local now
if ARGV[2] ~= '' then
  now = tonumber(ARGV[2])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local n = tonumber(ARGV[3])

-- Lua's default number format keeps 14 digits; microsecond times need 16.
local function num(x)
  return string.format('%.17g', x)
end

local function cost_of(member)
  return tonumber(string.match(member, '^%d+:(%d+):'))
end

-- layer reads limit i's state and decides it. It returns allowed,
-- remaining, reset, retry, wait, and the state to write when commit is true
-- and the limit admits (x, y, z: see write).
local function layer(i, commit)
  local a = 5 + (i - 1) * 6
  local alg = ARGV[a + 1]
  local L, W, B, c = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5])
  local k1 = KEYS[2 * i - 1]
  local now = now
  if alg == 'tb' or alg == 'lb' then
    -- the value is 'tat|expiry', the expiry (us) its TTL was last set to
    local tat, exp
    local v = redis.call('GET', k1)
    if v then
      local a, b = string.match(v, '^([^|]+)|(.*)$')
      tat, exp = tonumber(a), b
    end
    local t = W / L
    local base = now
    if tat and tat > now then base = tat end
    local tol = B * t
    if alg == 'tb' then
      local newTat = base + c * t
      local ok = newTat - now <= tol
      local used = base - now
      if ok and commit then used = newTat - now end
      local retry = 0
      if not ok then retry = math.ceil(newTat - now - tol) end
      return ok, math.max(0, math.floor((tol - used) / t)), math.ceil(used), retry, 0, newTat, exp
    end
    local wait = base - now
    local ok = wait <= tol
    local depth, delay, newTat = wait, 0, base + c * t
    if ok and commit then
      depth = newTat - now
      delay = math.ceil(wait)
    end
    local retry = 0
    if not ok then retry = math.ceil(wait - tol) end
    return ok, math.max(0, math.floor((tol - depth) / t) + 1), math.ceil(depth), retry, delay, newTat, exp
  elseif alg == 'fw' then
    local v = redis.call('HMGET', k1, 'i', 'n')
    local sidx = tonumber(v[1])
    local idx = math.floor(now / W)
    -- a clock that stepped back across a boundary counts in the stored
    -- window; any other index is stale
    if sidx == idx + 1 then idx = sidx; now = sidx * W end
    local count = 0
    if sidx == idx then count = tonumber(v[2]) end
    local ok = count + c <= L
    if ok and commit then count = count + c end
    local reset = (idx + 1) * W - now
    local retry = 0
    if not ok then retry = reset end
    return ok, math.max(0, L - count), reset, retry, 0, idx, count, sidx ~= idx
  elseif alg == 'swc' then
    local v = redis.call('HMGET', k1, 'i', 'c', 'p')
    local sidx = tonumber(v[1])
    local idx = math.floor(now / W)
    if sidx == idx + 1 then idx = sidx; now = sidx * W end
    local curr, prev = 0, 0
    if sidx == idx then
      curr, prev = tonumber(v[2]), tonumber(v[3])
    elseif sidx == idx - 1 then
      prev = tonumber(v[2])
    end
    local elapsed = now - idx * W
    local est = prev * (W - elapsed) / W + curr
    local ok = est + c <= L
    if ok and commit then
      curr = curr + c
      est = est + c
    end
    local reset = 0
    if curr > 0 then
      reset = (idx + 2) * W - now
    elseif prev > 0 then
      reset = (idx + 1) * W - now
    end
    local retry = 0
    if not ok then
      local avail = L - c - curr
      if avail >= 0 and prev > 0 then
        retry = W - math.floor(avail * W / prev) - elapsed
      elseif L - c < 0 or curr == 0 then
        retry = reset
      else
        retry = (idx + 1) * W - now + W - math.floor((L - c) * W / curr)
      end
    end
    return ok, math.max(0, math.floor(L - est)), reset, retry, 0, idx, curr, prev, sidx ~= idx
  end
  -- sliding log: members are 'us:cost:seq'; the metadata hash holds the sum
  -- of the logged costs (n) and the last sequence number (q).
  local v = redis.call('HMGET', KEYS[2 * i], 'n', 'q')
  local sum = tonumber(v[1]) or 0
  local old = redis.call('ZRANGEBYSCORE', k1, '-inf', num(now - W))
  for j = 1, #old do
    sum = sum - cost_of(old[j])
  end
  local newest
  local last = redis.call('ZRANGE', k1, -1, -1, 'WITHSCORES')
  if #last == 2 and tonumber(last[2]) > now - W then newest = tonumber(last[2]) end
  local ok = sum + c <= L
  if ok and commit then
    sum = sum + c
    newest = now
  end
  local reset = 0
  if newest then reset = newest + W - now end
  local retry = 0
  if not ok then
    retry = reset
    if c <= L then
      local need, freed = sum + c - L, 0
      local live = redis.call('ZRANGEBYSCORE', k1, '(' .. num(now - W), '+inf', 'WITHSCORES', 'LIMIT', 0, c)
      for j = 1, #live, 2 do
        freed = freed + cost_of(live[j])
        if freed >= need then
          retry = tonumber(live[j + 1]) + W - now
          break
        end
      end
    end
  end
  return ok, math.max(0, L - sum), reset, retry, 0, sum, (tonumber(v[2]) or 0) + 1, #old
end

-- write persists limit i's consumed state with its TTL. A window's TTL is
-- set when the window changes, a bucket's when its full time outruns it, the
-- sliding log's on every write.
local function write(i, x, y, z, w)
  local a = 5 + (i - 1) * 6
  local alg, W = ARGV[a + 1], tonumber(ARGV[a + 3])
  local k1 = KEYS[2 * i - 1]
  if alg == 'tb' or alg == 'lb' then
    -- Setting a TTL costs Redis far more than a plain SET, so the TTL runs
    -- a window past the bucket's full time and is renewed only when the
    -- full time passes it.
    if y and x <= tonumber(y) then
      redis.call('SET', k1, num(x) .. '|' .. y, 'KEEPTTL')
    else
      local e = math.ceil(x + W)
      redis.call('SET', k1, num(x) .. '|' .. string.format('%d', e), 'PX', math.max(1, math.ceil((e - now) / 1000)))
    end
  elseif alg == 'fw' then
    redis.call('HSET', k1, 'i', num(x), 'n', num(y))
    if z then redis.call('PEXPIRE', k1, math.max(1, math.ceil(((x + 1) * W - now) / 1000))) end
  elseif alg == 'swc' then
    redis.call('HSET', k1, 'i', num(x), 'c', num(y), 'p', num(z))
    if w then redis.call('PEXPIRE', k1, math.max(1, math.ceil(((x + 2) * W - now) / 1000))) end
  else
    local k2 = KEYS[2 * i]
    if z > 0 then redis.call('ZREMRANGEBYSCORE', k1, '-inf', num(now - W)) end
    redis.call('ZADD', k1, num(now), string.format('%d:%d:%d', now, tonumber(ARGV[a + 5]), y))
    redis.call('HSET', k2, 'n', num(x), 'q', num(y))
    local ttl = math.max(1, math.ceil(W / 1000))
    redis.call('PEXPIRE', k1, ttl)
    redis.call('PEXPIRE', k2, ttl)
  end
end

local function count_usage(allowed)
  if not consume or ARGV[4] == '' then return end
  local field = 'r'
  if allowed then field = 'a' end
  local k = KEYS[2 * n + 1]
  -- A field's first increment is when its hash may have just been created.
  if redis.call('HINCRBY', k, ARGV[4] .. field, 1) == 1 then
    redis.call('EXPIRE', k, tonumber(ARGV[5]))
  end
end

local function delay_of(i, wait)
  if ARGV[5 + (i - 1) * 6 + 6] == '1' then return wait end
  return 0
end

if n == 1 then
  local ok, rem, reset, retry, wait, x, y, z, w = layer(1, consume)
  local delay = 0
  if ok and consume then
    write(1, x, y, z, w)
    delay = delay_of(1, wait)
  end
  count_usage(ok)
  return {ok and 1 or 0, delay, ok and 1 or 0, rem, reset, retry}
end

local res = {}
local allowed = true
for i = 1, n do
  res[i] = {layer(i, consume)}
  allowed = allowed and res[i][1]
end
local delay = 0
if consume and allowed then
  for i = 1, n do
    local r = res[i]
    write(i, r[6], r[7], r[8], r[9])
    delay = math.max(delay, delay_of(i, r[5]))
  end
elseif consume then
  -- All or nothing: layers that would have admitted report untouched state.
  for i = 1, n do
    if res[i][1] then res[i] = {layer(i, false)} end
  end
end
count_usage(allowed)
local out = {allowed and 1 or 0, delay}
for i = 1, n do
  local r = res[i]
  out[#out + 1] = r[1] and 1 or 0
  out[#out + 1] = r[2]
  out[#out + 1] = r[3]
  out[#out + 1] = r[4]
end
return out
