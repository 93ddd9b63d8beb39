-- decide.lua: one atomic rate-limit decision over every limit of one request.
-- It mirrors algorithm.go operation for operation (integer microseconds, the
-- same float64 steps in the same order), so both stores agree exactly.
--
-- KEYS[1]     the subject's state hash: every limit but the sliding logs keeps
--             its state in fields named by ARGV (see below), and field 'e'
--             holds the time (us) the hash's TTL runs out
-- KEYS[2j], KEYS[2j+1]  the j-th sliding log's sorted set and metadata hash
-- ARGV[1]     'a' consumes (Allow), 'p' only evaluates (Peek), a number k >= 2
--             decides k identical Allow requests one after the other, as k
--             calls in a row would (the caller coalesces concurrent ones)
-- ARGV[2]     now in microseconds, or '' to read Redis TIME (tests set it)
-- ARGV[3+6(i-1)..8+6(i-1)]  limit i: state field, algorithm code ('lq' is a
--             leaky bucket in queue mode), limit, window us, burst, cost
-- Fields: a bucket's virtual finish time (tat) is field F; a fixed window's
-- index F and count F..'+'; a sliding counter's index F, current count F..'+'
-- and previous count F..'-'.
-- Returns {allowed, delay us, now us, then per limit: allowed, remaining,
-- reset us, retry us}, k times over when coalesced. now is the decision's
-- time, so the middleware's X-RateLimit-Reset is exact whatever the
-- instance's clock says. Nothing is written unless every limit admits (all or nothing);
-- every key written gets a TTL here. Usage is counted by the caller (see
-- stats.go), not here: it cost as much as the state write.
--
-- Redis runs this body on every call and charges for every redis.call, so
-- all counter states are read with one HMGET and written with one HSET, a TTL
-- is set only when the hash's expiry must move (a PEXPIRE costs more than
-- the HSET), and numbers go to redis.call as Lua numbers, which Redis
-- formats exactly (%.17g) without a string.format here.

local consume = ARGV[1] ~= 'p'
-- k identical Allow calls of one subject, coalesced by the caller
local k = 1
if consume and ARGV[1] ~= 'a' then k = tonumber(ARGV[1]) end
local now
if ARGV[2] ~= '' then
  now = tonumber(ARGV[2])
else
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
local n = (#ARGV - 2) / 6
local K = KEYS[1]

-- One HMGET for every counter state; pos[i] is where limit i's first field
-- lands in the reply (reply[1] is 'e'), or a sliding log's first key in KEYS.
-- One limit, the common case, builds no table: its position is 2 either way.
local st, pos = {}, nil
if n == 1 then
  local f, code = ARGV[3], ARGV[4]
  if code == 'fw' then
    st = redis.call('HMGET', K, 'e', f, f .. '+')
  elseif code == 'swc' then
    st = redis.call('HMGET', K, 'e', f, f .. '+', f .. '-')
  elseif code ~= 'swl' then
    st = redis.call('HMGET', K, 'e', f)
  end
else
  -- m counts hm's entries: the length operator costs a search per use.
  local hm, m = {'HMGET', K, 'e'}, 3
  local logs = 0
  pos = {}
  for i = 1, n do
    local a = 6 * i - 4
    local code, f = ARGV[a + 2], ARGV[a + 1]
    if code == 'swl' then
      logs = logs + 1
      pos[i] = 2 * logs
    else
      pos[i] = m - 1
      m = m + 1
      hm[m] = f
      if code == 'fw' then
        m = m + 1
        hm[m] = f .. '+'
      elseif code == 'swc' then
        hm[m + 1] = f .. '+'
        hm[m + 2] = f .. '-'
        m = m + 2
      end
    end
  end
  if m > 3 then st = redis.call(unpack(hm)) end
end


-- layer decides limit i from the state read above. It returns allowed,
-- remaining, reset, retry, wait, then, for the write when commit is true and
-- the limit admits: the state (x, y, z) and when it stops mattering (exp).
local function layer(i, commit)
  local a = 6 * i - 4
  local code = ARGV[a + 2]
  -- arithmetic converts the numeric arguments more cheaply than tonumber
  local L, W, c = ARGV[a + 3] + 0, ARGV[a + 4] + 0, ARGV[a + 6] + 0
  local now = now
  if code == 'tb' or code == 'lb' or code == 'lq' then
    local tat = tonumber(st[(pos and pos[i] or 2)])
    local t = W / L
    local base = now
    if tat and tat > now then base = tat end
    local tol = ARGV[a + 5] * t
    if code == 'tb' then
      local newTat = base + c * t
      local ok = newTat - now <= tol
      local used = base - now
      if ok and commit then used = newTat - now end
      local retry = 0
      if not ok then retry = math.ceil(newTat - now - tol) end
      return ok, math.max(0, math.floor((tol - used) / t)), math.ceil(used), retry, 0, newTat, nil, nil, newTat
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
    return ok, math.max(0, math.floor((tol - depth) / t) + 1), math.ceil(depth), retry, delay, newTat, nil, nil, newTat
  elseif code == 'fw' then
    local p = (pos and pos[i] or 2)
    local sidx = tonumber(st[p])
    local idx = math.floor(now / W)
    -- a clock that stepped back across a boundary counts in the stored
    -- window; any other index is stale
    if sidx == idx + 1 then idx = sidx; now = sidx * W end
    local count = 0
    if sidx == idx then count = tonumber(st[p + 1]) end
    local ok = count + c <= L
    if ok and commit then count = count + c end
    local reset = (idx + 1) * W - now
    local retry = 0
    if not ok then retry = reset end
    return ok, math.max(0, L - count), reset, retry, 0, idx, count, nil, (idx + 1) * W
  elseif code == 'swc' then
    local p = (pos and pos[i] or 2)
    local sidx = tonumber(st[p])
    local idx = math.floor(now / W)
    if sidx == idx + 1 then idx = sidx; now = sidx * W end
    local curr, prev = 0, 0
    if sidx == idx then
      curr, prev = tonumber(st[p + 1]), tonumber(st[p + 2])
    elseif sidx == idx - 1 then
      prev = tonumber(st[p + 1])
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
    return ok, math.max(0, math.floor(L - est)), reset, retry, 0, idx, curr, prev, (idx + 2) * W
  end
  -- sliding log: members are 'us:cost:seq'; the metadata hash holds the sum
  -- of the logged costs (n) and the last sequence number (q).
  -- Lua's default number format keeps 14 digits; microsecond times need 16.
  local function num(x)
    return string.format('%.17g', x)
  end
  local function cost_of(member)
    return tonumber(string.match(member, '^%d+:(%d+):'))
  end
  local p = (pos and pos[i] or 2)
  local k1 = KEYS[p]
  local v = redis.call('HMGET', KEYS[p + 1], 'n', 'q')
  local sum = tonumber(v[1]) or 0
  local old = redis.call('ZRANGEBYSCORE', k1, '-inf', now - W)
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
  return ok, math.max(0, L - sum), reset, retry, 0, sum, (tonumber(v[2]) or 0) + 1, #old, nil
end

-- write_log persists sliding log i's admitted request with its TTL.
local function write_log(i, sum, seq, stale)
  local a = 6 * i - 4
  local W = tonumber(ARGV[a + 4])
  local p = (pos and pos[i] or 2)
  local k1, k2 = KEYS[p], KEYS[p + 1]
  if stale > 0 then redis.call('ZREMRANGEBYSCORE', k1, '-inf', now - W) end
  redis.call('ZADD', k1, now, string.format('%d:%d:%d', now, tonumber(ARGV[a + 6]), seq))
  redis.call('HSET', k2, 'n', sum, 'q', seq)
  local ttl = math.max(1, math.ceil(W / 1000))
  redis.call('PEXPIRE', k1, ttl)
  redis.call('PEXPIRE', k2, ttl)
end

-- The hash's TTL runs a window past the latest state's expiry and is renewed
-- only when an expiry passes the one it was last set to (field 'e').
local e = tonumber(st[1]) or 0

if k > 1 then
  -- put_state writes every counter state of st (updated in place) with one
  -- HSET, moving the hash's TTL when need passes e.
  local function put_state(need, ttl)
    local hs, m = {'HSET', K}, 2
    for i = 1, n do
      local a = 6 * i - 4
      local code = ARGV[a + 2]
      if code ~= 'swl' then
        local f, p = ARGV[a + 1], (pos and pos[i] or 2)
        hs[m + 1] = f
        hs[m + 2] = st[p]
        m = m + 2
        if code == 'fw' then
          hs[m + 1] = f .. '+'
          hs[m + 2] = st[p + 1]
          m = m + 2
        elseif code == 'swc' then
          hs[m + 1] = f .. '+'
          hs[m + 2] = st[p + 1]
          hs[m + 3] = f .. '-'
          hs[m + 4] = st[p + 2]
          m = m + 4
        end
      end
    end
    if need > e then
      ttl = math.ceil(ttl)
      hs[m + 1] = 'e'
      hs[m + 2] = ttl
      redis.call(unpack(hs))
      redis.call('PEXPIRE', K, math.max(1, math.ceil((ttl - now) / 1000)))
    else
      redis.call(unpack(hs))
    end
  end

  -- Coalesced requests: the state read once above is updated in st after
  -- each admission, so request j sees requests 1..j-1, and written once.
  local out, o = {}, 0
  local written, need, ttl = false, e, e
  for j = 1, k do
    local R = {}
    local allowed, delay = true, 0
    for i = 1, n do
      local b = 9 * i - 9
      local ok, rem, reset, retry, wait, x, y, z, exp = layer(i, true)
      R[b + 1], R[b + 2], R[b + 3], R[b + 4], R[b + 5] = ok, rem, reset, retry, wait
      R[b + 6], R[b + 7], R[b + 8], R[b + 9] = x, y, z, exp
      if not ok then allowed = false end
    end
    if allowed then
      for i = 1, n do
        local b, a = 9 * i - 9, 6 * i - 4
        local code = ARGV[a + 2]
        if code == 'swl' then
          write_log(i, R[b + 6], R[b + 7], R[b + 8])
        else
          local p = (pos and pos[i] or 2)
          st[p] = R[b + 6]
          if code == 'fw' then
            st[p + 1] = R[b + 7]
          elseif code == 'swc' then
            st[p + 1], st[p + 2] = R[b + 7], R[b + 8]
          elseif code == 'lq' and R[b + 5] > delay then
            delay = R[b + 5]
          end
          local exp = R[b + 9]
          if exp > need then need = exp end
          exp = exp + ARGV[a + 4]
          if exp > ttl then ttl = exp end
          written = true
        end
      end
    else
      for i = 1, n do
        local b = 9 * i - 9
        if R[b + 1] then
          R[b + 1], R[b + 2], R[b + 3], R[b + 4] = layer(i, false)
        end
      end
    end
    out[o + 1] = allowed and 1 or 0
    out[o + 2] = delay
    out[o + 3] = now
    o = o + 3
    for i = 1, n do
      local b = 9 * i - 9
      out[o + 1] = R[b + 1] and 1 or 0
      out[o + 2] = R[b + 2]
      out[o + 3] = R[b + 3]
      out[o + 4] = R[b + 4]
      o = o + 4
    end
  end
  if written then put_state(need, ttl) end
  return out
end

if n == 1 then
  local ok, rem, reset, retry, wait, x, y, z, exp = layer(1, consume)
  local delay = 0
  if ok and consume then
    local f, code = ARGV[3], ARGV[4]
    if code == 'swl' then
      write_log(1, x, y, z)
    else
      if code == 'lq' then delay = wait end
      local ttl = nil
      if exp > e then ttl = math.ceil(exp + ARGV[6]) end
      if code == 'fw' then
        if ttl then
          redis.call('HSET', K, f, x, f .. '+', y, 'e', ttl)
        else
          redis.call('HSET', K, f, x, f .. '+', y)
        end
      elseif code == 'swc' then
        if ttl then
          redis.call('HSET', K, f, x, f .. '+', y, f .. '-', z, 'e', ttl)
        else
          redis.call('HSET', K, f, x, f .. '+', y, f .. '-', z)
        end
      elseif ttl then
        redis.call('HSET', K, f, x, 'e', ttl)
      else
        redis.call('HSET', K, f, x)
      end
      if ttl then redis.call('PEXPIRE', K, math.max(1, math.ceil((ttl - now) / 1000))) end
    end
  end
  return {ok and 1 or 0, delay, now, ok and 1 or 0, rem, reset, retry}
end

-- Several limits: every layer's nine results in one flat table R (a table
-- per layer costs Lua more than the arithmetic), stride 9.
local R = {}
local allowed = true
local delay = 0
for i = 1, n do
  local b = 9 * i - 9
  local ok, rem, reset, retry, wait, x, y, z, exp = layer(i, consume)
  R[b + 1], R[b + 2], R[b + 3], R[b + 4], R[b + 5] = ok, rem, reset, retry, wait
  R[b + 6], R[b + 7], R[b + 8], R[b + 9] = x, y, z, exp
  if not ok then allowed = false end
end

if consume and allowed then
  -- One HSET for every counter state.
  local hs, m = {'HSET', K}, 2
  local need, ttl = e, e
  for i = 1, n do
    local b = 9 * i - 9
    local a = 6 * i - 4
    local code = ARGV[a + 2]
    if code == 'swl' then
      write_log(i, R[b + 6], R[b + 7], R[b + 8])
    else
      local f = ARGV[a + 1]
      hs[m + 1] = f
      hs[m + 2] = R[b + 6]
      m = m + 2
      if code == 'fw' then
        hs[m + 1] = f .. '+'
        hs[m + 2] = R[b + 7]
        m = m + 2
      elseif code == 'swc' then
        hs[m + 1] = f .. '+'
        hs[m + 2] = R[b + 7]
        hs[m + 3] = f .. '-'
        hs[m + 4] = R[b + 8]
        m = m + 4
      elseif code == 'lq' and R[b + 5] > delay then
        delay = R[b + 5]
      end
      local exp = R[b + 9]
      if exp > need then need = exp end
      exp = exp + ARGV[a + 4]
      if exp > ttl then ttl = exp end
    end
  end
  if m > 2 then
    if need > e then
      ttl = math.ceil(ttl)
      hs[m + 1] = 'e'
      hs[m + 2] = ttl
      redis.call(unpack(hs))
      redis.call('PEXPIRE', K, math.max(1, math.ceil((ttl - now) / 1000)))
    else
      redis.call(unpack(hs))
    end
  end
elseif consume then
  -- All or nothing: layers that would have admitted report untouched state.
  for i = 1, n do
    local b = 9 * i - 9
    if R[b + 1] then
      R[b + 1], R[b + 2], R[b + 3], R[b + 4] = layer(i, false)
    end
  end
end

local out = {allowed and 1 or 0, delay, now}
for i = 1, n do
  local b, o = 9 * i - 9, 4 * i - 1
  out[o + 1] = R[b + 1] and 1 or 0
  out[o + 2] = R[b + 2]
  out[o + 3] = R[b + 3]
  out[o + 4] = R[b + 4]
end
return out
