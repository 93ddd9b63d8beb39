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

local function ms(us)
  return math.max(1, math.ceil(us / 1000))
end

-- load reads one limit's state.
local function load(alg, k1, k2, w)
  local s = {}
  if alg == 'fw' then
    local v = redis.call('HMGET', k1, 'i', 'n')
    s.idx, s.count = tonumber(v[1]), tonumber(v[2]) or 0
  elseif alg == 'swc' then
    local v = redis.call('HMGET', k1, 'i', 'c', 'p')
    s.idx, s.count, s.prev = tonumber(v[1]), tonumber(v[2]) or 0, tonumber(v[3]) or 0
  elseif alg == 'tb' or alg == 'lb' then
    s.tat = tonumber(redis.call('GET', k1))
  else
    local v = redis.call('HMGET', k2, 'n', 'q')
    local sum = tonumber(v[1]) or 0
    local old = redis.call('ZRANGEBYSCORE', k1, '-inf', num(now - w))
    for _, m in ipairs(old) do
      sum = sum - tonumber(string.match(m, '^%d+:(%d+):'))
    end
    s.sum, s.seq, s.expired = sum, tonumber(v[2]) or 0, #old
    local newest = redis.call('ZRANGE', k1, -1, -1, 'WITHSCORES')
    if #newest == 2 and tonumber(newest[2]) > now - w then
      s.newest = tonumber(newest[2])
    end
  end
  return s
end

-- eval returns allowed, remaining, reset, retry, wait and the state to write
-- when commit is true and the limit admits.
local function eval(alg, s, p, k1, commit)
  local L, W, B, c = p.L, p.W, p.B, p.c
  local now = now -- the fixed and sliding windows may clamp it for their layer
  if alg == 'fw' then
    local idx = math.floor(now / W)
    -- a clock that stepped back across a boundary counts in the stored window
    if s.idx and s.idx > idx then idx = s.idx; now = s.idx * W end
    local count = 0
    if s.idx == idx then count = s.count end
    local ok = count + c <= L
    local nxt
    if ok and commit then
      count = count + c
      nxt = {idx = idx, count = count}
    end
    local reset = (idx + 1) * W - now
    local retry = 0
    if not ok then retry = reset end
    return ok, math.max(0, L - count), reset, retry, 0, nxt
  elseif alg == 'swc' then
    local idx = math.floor(now / W)
    if s.idx and s.idx > idx then idx = s.idx; now = s.idx * W end
    local curr, prev = 0, 0
    if s.idx == idx then
      curr, prev = s.count, s.prev
    elseif s.idx == idx - 1 then
      prev = s.count
    end
    local elapsed = now - idx * W
    local est = prev * (W - elapsed) / W + curr
    local ok = est + c <= L
    local nxt
    if ok and commit then
      curr = curr + c
      est = est + c
      nxt = {idx = idx, count = curr, prev = prev}
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
    return ok, math.max(0, math.floor(L - est)), reset, retry, 0, nxt
  elseif alg == 'tb' then
    local t = W / L
    local base = now
    if s.tat and s.tat > now then base = s.tat end
    local tol = B * t
    local newTat = base + c * t
    local ok = newTat - now <= tol
    local used = base - now
    local nxt
    if ok and commit then
      used = newTat - now
      nxt = {tat = newTat}
    end
    local retry = 0
    if not ok then retry = math.ceil(newTat - now - tol) end
    return ok, math.max(0, math.floor((tol - used) / t)), math.ceil(used), retry, 0, nxt
  elseif alg == 'lb' then
    local t = W / L
    local base = now
    if s.tat and s.tat > now then base = s.tat end
    local tol = B * t
    local wait = base - now
    local ok = wait <= tol
    local depth = wait
    local nxt
    local delay = 0
    if ok and commit then
      local newTat = base + c * t
      depth = newTat - now
      nxt = {tat = newTat}
      delay = math.ceil(wait)
    end
    local retry = 0
    if not ok then retry = math.ceil(wait - tol) end
    return ok, math.max(0, math.floor((tol - depth) / t) + 1), math.ceil(depth), retry, delay, nxt
  else
    local sum = s.sum
    local ok = sum + c <= L
    local newest = s.newest
    local nxt
    if ok and commit then
      sum = sum + c
      newest = now
      nxt = {sum = sum}
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
          freed = freed + tonumber(string.match(live[j], '^%d+:(%d+):'))
          if freed >= need then
            retry = tonumber(live[j + 1]) + W - now
            break
          end
        end
      end
    end
    return ok, math.max(0, L - sum), reset, retry, 0, nxt
  end
end

local function store(alg, k1, k2, s, p, nxt)
  if alg == 'fw' then
    redis.call('HSET', k1, 'i', num(nxt.idx), 'n', num(nxt.count))
    redis.call('PEXPIRE', k1, ms((nxt.idx + 1) * p.W - now))
  elseif alg == 'swc' then
    redis.call('HSET', k1, 'i', num(nxt.idx), 'c', num(nxt.count), 'p', num(nxt.prev))
    redis.call('PEXPIRE', k1, ms((nxt.idx + 2) * p.W - now))
  elseif alg == 'tb' or alg == 'lb' then
    redis.call('SET', k1, num(nxt.tat), 'PX', ms(nxt.tat - now))
  else
    if s.expired > 0 then
      redis.call('ZREMRANGEBYSCORE', k1, '-inf', num(now - p.W))
    end
    local seq = s.seq + 1
    redis.call('ZADD', k1, num(now), string.format('%d:%d:%d', now, p.c, seq))
    redis.call('HSET', k2, 'n', num(nxt.sum), 'q', num(seq))
    redis.call('PEXPIRE', k1, ms(p.W))
    redis.call('PEXPIRE', k2, ms(p.W))
  end
end

local algs, ps, states, oks = {}, {}, {}, {}
local allowed = true
local res = {}
for i = 1, n do
  local a = 5 + (i - 1) * 6
  local alg = ARGV[a + 1]
  local p = {L = tonumber(ARGV[a + 2]), W = tonumber(ARGV[a + 3]), B = tonumber(ARGV[a + 4]),
    c = tonumber(ARGV[a + 5]), q = ARGV[a + 6] == '1'}
  local s = load(alg, KEYS[2 * i - 1], KEYS[2 * i], p.W)
  local ok, rem, reset, retry, wait, nxt = eval(alg, s, p, KEYS[2 * i - 1], consume)
  algs[i], ps[i], states[i] = alg, p, s
  res[i] = {ok, rem, reset, retry, wait, nxt}
  allowed = allowed and ok
end

local delay = 0
if consume and allowed then
  for i = 1, n do
    store(algs[i], KEYS[2 * i - 1], KEYS[2 * i], states[i], ps[i], res[i][6])
    if ps[i].q then delay = math.max(delay, res[i][5]) end
  end
elseif consume then
  -- All or nothing: layers that would have admitted report untouched state.
  for i = 1, n do
    if res[i][1] then
      local ok, rem, reset, retry, wait = eval(algs[i], states[i], ps[i], KEYS[2 * i - 1], false)
      res[i] = {ok, rem, reset, retry, wait}
    end
  end
end

if consume and ARGV[4] ~= '' then
  local field = 'r'
  if allowed then field = 'a' end
  local k = KEYS[2 * n + 1]
  redis.call('HINCRBY', k, ARGV[4] .. field, 1)
  redis.call('EXPIRE', k, tonumber(ARGV[5]))
end

local out = {allowed and 1 or 0, delay}
for i = 1, n do
  local r = res[i]
  out[#out + 1] = r[1] and 1 or 0
  out[#out + 1] = r[2]
  out[#out + 1] = r[3]
  out[#out + 1] = r[4]
end
return out
