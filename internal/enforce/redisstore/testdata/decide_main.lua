-- decide.lua: atomic rate-limit decisions, each over every limit of one
-- request. It mirrors algorithm.go operation for operation (integer
-- microseconds, the same float64 steps in the same order), so both stores
-- agree exactly.
--
-- One call of the script decides a batch of requests (the store sends every
-- decision queued meanwhile in one call, sparing Redis the price of a command
-- per decision), one after the other, each exactly as a call of its own would.
--
-- ARGV[1]     now in microseconds, or '' to read Redis TIME once (tests set it)
-- ARGV[2]     m, the number of distinct limits the call's requests use
-- ARGV[3+8(j-1) .. 10+8(j-1)]  limit j: state field, algorithm code ('lq' is
--             a leaky bucket in queue mode), limit, window us, burst, cost,
--             its figures 'code:window:limit:burst' (code 'lb' for 'lq'
--             too), and 1 for a shadow limit (0 otherwise), which is decided
--             and consumes when it admits but never rejects the request; sent
--             once per call however many requests use it
-- then per request, from ARGV[p]:
--   ARGV[p]   'a' consumes (Allow), 'p' only evaluates (Peek), 'f' consumes
--             whatever remains (Charge), a number k >= 2
--             decides k identical Allow requests one after the other, as k
--             requests in a row would (the caller coalesces concurrent ones)
--   ARGV[p+1] n, the number of the request's limits
--   ARGV[p+2 .. p+1+n]  the request's limits, as numbers j of the list above
-- or, when every request has the same mode and limits (one plan's requests,
-- the common case), 'u' and then those three once for all of them, which
-- spares Redis two arguments a request
-- and per request, from KEYS[q]:
--   KEYS[q]   the subject's state hash: every limit but the sliding logs keeps
--             its state in fields named by its limits, and field 'e' holds the time
--             (us) the hash's TTL runs out
--   KEYS[q+j]  the j-th sliding log's hash (see LOG below)
-- Fields: a bucket's virtual finish time (tat) is field F; a fixed window's
-- index F and count F..':+'; a sliding counter's index F, current count
-- F..':+' and previous count F..':-'; and every counter's figures, as it was
-- last written under them, F..':#'. A limit edited in place (its figures no
-- longer those stored) has its state rescaled to the new figures as
-- rescale in algorithm.go does, and written back under them with the next
-- admitted request; fields another algorithm left are deleted then. (Plan
-- limit names hold no ':', so no limit's F is another's suffixed field.)
--
-- Returns {now us, then per request: allowed, delay us, then per limit:
-- allowed, remaining, reset us, retry us}, k times over when coalesced. now is
-- the decisions' time, so the middleware's X-RateLimit-Reset is exact
-- whatever the instance's clock says. A request whose Redis command fails
-- (a key of the wrong type, say) gets that error in place of its values,
-- and the others are decided all the same. Nothing is written for a request
-- unless every limit admits it (all or nothing); every key written gets a TTL
-- here. Usage is counted by the caller (see stats.go), not here: it cost as
-- much as the state write.
--
-- Redis runs this body on every call and charges for every redis.call, so
-- all of a request's counter states are read with one HMGET and written with
-- one HSET, a TTL is set only when the hash's expiry must move (a PEXPIRE
-- costs more than the HSET), and numbers go to redis.call as Lua numbers,
-- which Redis formats exactly (%.17g) without a string.format here.

-- Library functions as locals: a global's field costs two table lookups per
-- use, an upvalue none (the 3-layer path uses them some thirty times).
local floor, ceil, max, min, call, unpack = math.floor, math.ceil, math.max, math.min, redis.call, unpack

local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local t = call('TIME')
  now = t[1] * 1000000 + t[2]
end

-- The request being decided: its keys start at KEYS[KB] (K); n limits, in
-- V; consume and k from its
-- mode; st is its counter states as read, pos[i] where limit i's state is
-- (its first field in st, or a sliding log's first key in KEYS), nil when
-- the request has one limit; e is when the hash's TTL runs out.
-- TWO are the codes whose state is an index and a count (F, F:+): a fixed
-- window's, and a quota's (the period's start and its count).
local TWO = {fw = true, qd = true, qm = true, qy = true}

-- A quota's calendar, as periodBounds in quota.go computes it, in UTC
-- integer arithmetic: days_from_civil and civil_from_days are Howard
-- Hinnant's algorithms.
local DAY = 86400000000
local function days_from_civil(y, m, d)
  if m <= 2 then y = y - 1 end
  local era = floor(y / 400)
  local yoe = y - era * 400
  local mp = m + 9
  if m > 2 then mp = m - 3 end
  local doy = floor((153 * mp + 2) / 5) + d - 1
  local doe = yoe * 365 + floor(yoe / 4) - floor(yoe / 100) + doy
  return era * 146097 + doe - 719468
end
local function civil_from_days(z)
  z = z + 719468
  local era = floor(z / 146097)
  local doe = z - era * 146097
  local yoe = floor((doe - floor(doe / 1460) + floor(doe / 36524) - floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + floor(yoe / 4) - floor(yoe / 100))
  local mp = floor((5 * doy + 2) / 153)
  local d = doy - floor((153 * mp + 2) / 5) + 1
  local m = mp + 3
  if mp >= 10 then m = mp - 9 end
  local y = yoe + era * 400
  if m <= 2 then y = y + 1 end
  return y, m, d
end
-- at is the renewal instant in month m of year y for an anchor on day d0 at
-- tod0 µs past midnight: day d0, or the month's last day when shorter.
local function at(y, m, d0, tod0)
  local ny, nm = y, m + 1
  if nm > 12 then ny, nm = y + 1, 1 end
  local last = days_from_civil(ny, nm, 1) - days_from_civil(y, m, 1)
  return days_from_civil(y, m, min(d0, last)) * DAY + tod0
end
-- period returns the start and end (µs) of the quota period holding now.
local function period(code, now, anchor)
  if code == 'qd' then
    local s = anchor + floor((now - anchor) / DAY) * DAY
    return s, s + DAY
  end
  local ad = floor(anchor / DAY)
  local tod0 = anchor - ad * DAY
  local _, am, d0 = civil_from_days(ad)
  local y, m = civil_from_days(floor(now / DAY))
  if code == 'qm' then
    local c = at(y, m, d0, tod0)
    if now >= c then
      if m == 12 then return c, at(y + 1, 1, d0, tod0) end
      return c, at(y, m + 1, d0, tod0)
    end
    if m == 1 then return at(y - 1, 12, d0, tod0), c end
    return at(y, m - 1, d0, tod0), c
  end
  local c = at(y, am, d0, tod0)
  if now >= c then return c, at(y + 1, am, d0, tod0) end
  return at(y - 1, am, d0, tod0), c
end

-- fixed[i] is set when limit i's state was stored under other figures (or
-- none): the algorithm code it was stored under, or ''. rescale has then
-- rewritten it in st as a state of the limit's figures, which a decision
-- that consumes writes back even when it rejects (see rescale in
-- algorithm.go).
local KB, K, n, consume, k, st, pos, e, fixed
-- LOGS counts the request's sliding logs.
local LOGS = 0
-- same is set when the request's limits are the previous request's (a
-- batch of one plan's requests, the common case): its V, and for several
-- limits the HMGET's field list (HM, hmn entries long) and POS, stand.
local same, hmn
-- NH, NP and NM hold the current request's limits' field names F:#, F:+ and
-- F:-, built once per call per limit (DH, DP, DM): a concatenation hashes
-- its result. HM, HS, POS and DIRTY are reused by every request (DIRTY[p]
-- marks a value of st that changed, to be written).
local NH, NP, NM, DH, DP, DM, POS, DIRTY = {}, {}, {}, {}, {}, {}, {}, {}
local HM = {'HMGET', nil, 'e', nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil}
local HS = {'HSET', nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil}
-- R holds a request's nine results per layer, stride 9, reused by every
-- request and coalesced call: building a table costs Lua more than the
-- arithmetic.
local R = {nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil}
-- D holds the call's limits, eight per limit: code, limit, window, burst and
-- cost as numbers, the state field, the figures and the shadow flag;
-- converted once per call.
local D = {nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil}
-- V holds the current request's limits, eight per limit as in D, copied in
-- order: a coalesced request reads them k times.
local V = {nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil}
-- the reply, o values long; made as long as one request with one limit
-- needs (a table that grows reallocates), and trimmed at the end
local out, o = {now, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil}, 1

-- LOG: a sliding log is one hash, KEYS[q+j] for the request's j-th log:
-- its admitted requests in the order they came, packed 8 bytes each (the
-- time in us, 7 bytes big-endian, then the cost, 1 to 255; a cost byte of 0
-- is followed by the cost in 8 more bytes), in chunks of at most CHUNK
-- bytes: the open chunk 't', sealed ones under the numbers h .. s-1 (h is
-- the oldest), and 'm' the metadata, six 7-byte numbers: h, o (the head
-- entry's offset, 1-based, in chunk h, or in 't' when h = s), s, n (the
-- cost logged from the head on), z (the newest entry's time), a (the head
-- entry's time). 10,000 requests a minute take about 9 bytes each
-- (TestSlidingLogMemory), against 137 in the sorted set this replaced:
-- a sealed chunk of 504 bytes fills a 512-byte allocation, and costs its
-- hash entry about 40 more.
local CHUNK = 504
local char, byte, sub = string.char, string.byte, string.sub
local LOG = {}

-- be7 encodes x, an integer in [0, 2^53), in 7 bytes, big-endian.
local function be7(x)
  local r7 = x % 256
  x = (x - r7) / 256
  local r6 = x % 256
  x = (x - r6) / 256
  local r5 = x % 256
  x = (x - r5) / 256
  local r4 = x % 256
  x = (x - r4) / 256
  local r3 = x % 256
  x = (x - r3) / 256
  local r2 = x % 256
  return char((x - r2) / 256, r2, r3, r4, r5, r6, r7)
end

-- d7 decodes the 7 bytes of b at at.
local function d7(b, at)
  local b1, b2, b3, b4, b5, b6, b7 = byte(b, at, at + 6)
  return (((((b1 * 256 + b2) * 256 + b3) * 256 + b4) * 256 + b5) * 256 + b6) * 256 + b7
end

local function pack_entry(ts, c)
  if c >= 1 and c <= 255 and c % 1 == 0 then return be7(ts) .. char(c) end
  return be7(ts) .. '\0\0' .. be7(c)
end

-- entry returns the time and cost of the entry of chunk b at at, and the
-- offset of the next one.
local function entry(b, at)
  local c = byte(b, at + 7)
  if c > 0 then return d7(b, at), c, at + 8 end
  return d7(b, at), d7(b, at + 9), at + 16
end

local function pack_meta(h, o, s, n, z, a)
  return be7(h) .. be7(o) .. be7(s) .. be7(n) .. be7(z) .. be7(a)
end

local function unmeta(m)
  return d7(m, 1), d7(m, 8), d7(m, 15), d7(m, 22), d7(m, 29), d7(m, 36)
end

-- rescale rewrites in st, as a state of the limit's figures, the state of
-- every counter limit stored under other figures, as rescale in
-- algorithm.go does, noting each in fixed.
local function rescale()
  fixed = nil
  local ps = pos
  for i = 1, n do
    local v = 8 * i - 8
    local p = ps and ps[i] or 2
    -- the figures first: they match but after an edit (a sliding log's p
    -- is a key's, and its st[p + 1] whatever comes)
    if st[p + 1] ~= V[v + 7] and V[v + 1] ~= 'swl' then
      local code = V[v + 1]
      local fig, W, L = st[p + 1], V[v + 3], V[v + 2]
      local a, y0, z0 = tonumber(st[p]), tonumber(st[p + 2]), tonumber(st[p + 3])
      local old = ''
      if fig then
        local oc, ow, ol = string.match(fig, '^(%a+):(%d+):(%d+):')
        old = oc
        ow, ol = tonumber(ow), tonumber(ol)
        local kc = code
        if kc == 'lq' then kc = 'lb' end
        if a == nil then
          -- no state to rescale
        elseif oc ~= kc then
          a = nil
        elseif TWO[kc] and kc ~= 'fw' then
          -- a quota of the same period: its count stands against the new limit
        elseif kc == 'fw' or kc == 'swc' then
          if ow ~= W then
            local idx = floor(now / ow)
            if a == idx or a == idx + 1 then
              a = floor(now / W)
            elseif a == idx - 1 and kc == 'swc' then
              a, y0, z0 = floor(now / W), 0, y0
            else
              a = nil
            end
          end
        elseif (ow ~= W or ol ~= L) and a > now then
          a = now + (a - now) / (ow / ol) * (W / L)
        end
      else
        a = nil
      end
      st[p], st[p + 1] = a or false, V[v + 7]
      if TWO[code] then
        st[p + 2] = a and y0 or false
      elseif code == 'swc' then
        st[p + 2], st[p + 3] = a and y0 or false, a and z0 or false
      end
      fixed = fixed or {}
      fixed[i] = old
    end
  end
end

-- layer decides limit i from the state read. It returns allowed, remaining,
-- reset, retry, wait, then, for the write when commit is true and the limit
-- admits: the state (x, y, z) and when it stops mattering (exp).
local function layer(i, commit)
  local v = 8 * i - 8
  local code, L, W, c = V[v + 1], V[v + 2], V[v + 3], V[v + 5]
  local now = now
  -- a counter's state: a (tat or window index), y0 and z0 (counts)
  local a, y0, z0
  if code ~= 'swl' then
    -- parsed once: the numbers replace the strings in st, so a coalesced
    -- request's later calls, and the write's comparison, take no strtod;
    -- by arithmetic, which on Redis's Lua costs 70 - 200 ns a string
    -- against 160 - 300 for tonumber (7 per 3-layer decision: 12.75 ->
    -- 11.72 us a decision, 1 layer 5.44 -> 5.13, SCRIPT_AB, load 6)
    local p = pos and pos[i] or 2
    a = st[p]
    if a then
      a = a + 0
      st[p] = a
    end
    if TWO[code] then
      y0 = st[p + 2]
      if y0 then
        y0 = y0 + 0
        st[p + 2] = y0
      end
    elseif code == 'swc' then
      y0, z0 = st[p + 2], st[p + 3]
      if y0 then
        y0 = y0 + 0
        st[p + 2] = y0
      end
      if z0 then
        z0 = z0 + 0
        st[p + 3] = z0
      end
    end
  end
  if code == 'tb' or code == 'lb' or code == 'lq' then
    local tat = a
    local t = W / L
    local base = now
    if tat and tat > now then base = tat end
    local tol = V[v + 4] * t
    if code == 'tb' then
      local newTat = base + c * t
      local ok = newTat - now <= tol
      local used = base - now
      if ok and commit then used = newTat - now end
      local retry = 0
      if not ok then retry = ceil(newTat - now - tol) end
      return ok, max(0, floor((tol - used) / t)), ceil(used), retry, 0, newTat, nil, nil, newTat
    end
    local wait = base - now
    local ok = wait <= tol
    local depth, delay, newTat = wait, 0, base + c * t
    if ok and commit then
      depth = newTat - now
      delay = ceil(wait)
    end
    local retry = 0
    if not ok then retry = ceil(wait - tol) end
    return ok, max(0, floor((tol - depth) / t) + 1), ceil(depth), retry, delay, newTat, nil, nil, newTat
  elseif code == 'fw' then
    local sidx = a
    local idx = floor(now / W)
    -- a clock that stepped back across a boundary counts in the stored
    -- window; any other index is stale
    if sidx == idx + 1 then idx = sidx; now = sidx * W end
    local count = 0
    if sidx == idx then count = y0 end
    local ok = count + c <= L
    if ok and commit then count = count + c end
    local reset = (idx + 1) * W - now
    local retry = 0
    if not ok then retry = reset end
    return ok, max(0, L - count), reset, retry, 0, idx, count, nil, (idx + 1) * W
  elseif code == 'swc' then
    local sidx = a
    local idx = floor(now / W)
    if sidx == idx + 1 then idx = sidx; now = sidx * W end
    local curr, prev = 0, 0
    if sidx == idx then
      curr, prev = y0, z0
    elseif sidx == idx - 1 then
      prev = y0
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
        retry = W - floor(avail * W / prev) - elapsed
      elseif L - c < 0 or curr == 0 then
        retry = reset
      else
        retry = (idx + 1) * W - now + W - floor((L - c) * W / curr)
      end
    end
    return ok, max(0, floor(L - est)), reset, retry, 0, idx, curr, prev, (idx + 2) * W
  end
  if TWO[code] then
    -- a quota: the burst slot carries the subject's anchor
    local s, e = period(code, now, V[v + 4])
    local count = 0
    if a == s then count = y0 end
    local ok = count + c <= L
    if ok and commit then count = count + c end
    local retry = 0
    if not ok then retry = e - now end
    return ok, max(0, L - count), e - now, retry, 0, s, count, nil, e
  end
  -- A sliding log (see LOG below): drop, without writing, the entries at
  -- or before now - W from the head, as the memory store's logRing does.
  local lk = KEYS[pos and pos[i] or KB + 1]
  local r = call('HMGET', lk, 'm', 't')
  local tail = r[2] or ''
  local h, o, s, sum, z, a0 = 0, 1, 0, 0, 0, 0
  if r[1] then h, o, s, sum, z, a0 = unmeta(r[1]) end
  local h0, cut = h, now - W
  local ch -- the head's chunk, once read
  if sum > 0 and a0 <= cut then
    ch = h < s and call('HGET', lk, h) or tail
    while true do
      if o > #ch then
        if h >= s then break end -- the end of the log
        h, o = h + 1, 1
        ch = h < s and call('HGET', lk, h) or tail
      else
        local ts, x, nx = entry(ch, o)
        if ts > cut then
          a0 = ts
          break
        end
        sum, o = sum - x, nx
      end
    end
  end
  -- the newest entry is the last one logged, while any is live
  local newest
  if sum > 0 then newest = z end
  local ok = sum + c <= L
  if ok and commit then
    newest = now
  end
  local reset = 0
  if newest then reset = newest + W - now end
  local retry = 0
  if not ok then
    retry = reset
    if c <= L then
      -- wait until enough of the oldest entries leave the window
      local need, freed = sum + c - L, 0
      local ci, at = h, o
      local cc = ch or (ci < s and call('HGET', lk, ci) or tail)
      while true do
        if at > #cc then
          if ci >= s then break end
          ci, at = ci + 1, 1
          cc = ci < s and call('HGET', lk, ci) or tail
        else
          local ts, x, nx = entry(cc, at)
          freed = freed + x
          if freed >= need then
            retry = ts + W - now
            break
          end
          at = nx
        end
      end
    end
  end
  local lg = LOG[i]
  if not lg then
    lg = {}
    LOG[i] = lg
  end
  lg[1], lg[2], lg[3], lg[4], lg[5], lg[6], lg[7] = h0, h, o, s, sum, a0, tail
  local rem = L - sum
  if ok and commit then rem = rem - c end
  return ok, max(0, rem), reset, retry, 0, nil, nil, nil, nil
end

-- write_log logs sliding log i's admitted request at now, from the state
-- its layer call read (LOG[i]): it drops the sealed chunks wholly expired
-- and the tail's expired entries, appends the request to the tail, seals
-- the tail as chunk s once full, and moves the log's TTL.
local function write_log(i)
  local W, c = V[8 * i - 5], V[8 * i - 3]
  local lk = KEYS[pos and pos[i] or KB + 1]
  local lg = LOG[i]
  local h0, h, o, s, sum, a0, tail = lg[1], lg[2], lg[3], lg[4], lg[5], lg[6], lg[7]
  if h > h0 then
    local hd, m = {'HDEL', lk}, 2
    for ci = h0, min(h, s) - 1 do
      m = m + 1
      hd[m] = ci
    end
    if m > 2 then call(unpack(hd, 1, m)) end
  end
  if h >= s then
    -- the head is in the tail: its expired entries go
    if o > 1 then tail = sub(tail, o) end
    o = 1
  end
  if sum == 0 then a0 = now end
  local en = pack_entry(now, c)
  if #tail + #en > CHUNK then
    -- the head, when in the tail, stays at its offset in what becomes
    -- chunk s
    call('HSET', lk, s, tail)
    s, tail = s + 1, en
  else
    tail = tail .. en
  end
  call('HSET', lk, 't', tail, 'm', pack_meta(h, o, s, sum + c, now, a0))
  call('PEXPIRE', lk, max(1, ceil(W / 1000)))
end

-- drop deletes the fields of limit field f that its state, stored under
-- algorithm old and now of algorithm code, no longer uses: only after an
-- edit to another algorithm, so a tier edited in place leaves nothing stale.
local function drop(f, old, code)
  if old == 'swc' and code ~= 'swc' then
    if TWO[code] then
      call('HDEL', K, f .. ':-')
    else
      call('HDEL', K, f .. ':+', f .. ':-')
    end
  elseif TWO[old] and not TWO[code] and code ~= 'swc' then
    call('HDEL', K, f .. ':+')
  end
end

-- keep writes back, after a rejection, the rescaled states noted in fixed,
-- moving the hash's TTL as a write of them would.
local function keep()
  local hs, m, need, ttl = {'HSET', K}, 2, e, e
  for i, old in pairs(fixed) do
    local v = 8 * i - 8
    local code, f, W, p = V[v + 1], V[v + 6], V[v + 3], pos and pos[i] or 2
    local a = tonumber(st[p])
    if a then
      hs[m + 1], hs[m + 2], hs[m + 3], hs[m + 4] = f, a, f .. ':#', V[v + 7]
      m = m + 4
      local exp = a
      if TWO[code] then
        hs[m + 1], hs[m + 2] = f .. ':+', st[p + 2]
        m = m + 2
        exp = (a + 1) * W
        if code ~= 'fw' then exp = a + W end -- a quota's start and span
      elseif code == 'swc' then
        hs[m + 1], hs[m + 2], hs[m + 3], hs[m + 4] = f .. ':+', st[p + 2], f .. ':-', st[p + 3]
        m = m + 4
        exp = (a + 2) * W
      end
      if exp > need then need = exp end
      if exp + W > ttl then ttl = exp + W end
      drop(f, old, code)
    elseif old ~= '' then
      call('HDEL', K, f, f .. ':#', f .. ':+', f .. ':-')
    end
  end
  if m == 2 then return end
  if need > e then
    ttl = ceil(ttl)
    hs[m + 1], hs[m + 2] = 'e', ttl
    call(unpack(hs))
    call('PEXPIRE', K, max(1, ceil((ttl - now) / 1000)))
  else
    call(unpack(hs))
  end
end

-- decide decides the current request and appends its values to out. It is
-- one function, not several: Redis runs the script's body on every call, so
-- every function defined here is a closure built per call.
local function decide()
  -- Read every counter state with one HMGET into st (st[1] is 'e'), and for
  -- several limits note in pos where each one's state is. One limit, the
  -- common case, builds no table: its position is 2 (a counter) or KB + 1
  -- (a log) either way.
  if n == 1 then
    pos = nil
    local code, f = V[1], V[6]
    if TWO[code] then
      st = call('HMGET', K, 'e', f, NH[1], NP[1])
    elseif code == 'swc' then
      st = call('HMGET', K, 'e', f, NH[1], NP[1], NM[1])
    elseif code ~= 'swl' then
      st = call('HMGET', K, 'e', f, NH[1])
    else
      st = {false}
    end
  elseif same then
    -- the previous request's limits: its field list and positions stand
    HM[2] = K
    pos = POS
    if hmn > 3 then st = call(unpack(HM, 1, hmn)) else st = {false} end
  else
    -- m counts HM's entries: the length operator costs a search per use.
    local m = 3
    local l = 0
    HM[2] = K
    pos = POS
    for i = 1, n do
      local code, f = V[8 * i - 7], V[8 * i - 2]
      if code == 'swl' then
        l = l + 1
        pos[i] = KB + l
      else
        pos[i] = m - 1
        HM[m + 1] = f
        HM[m + 2] = NH[i]
        m = m + 2
        if TWO[code] then
          m = m + 1
          HM[m] = NP[i]
        elseif code == 'swc' then
          HM[m + 1] = NP[i]
          HM[m + 2] = NM[i]
          m = m + 2
        end
      end
    end
    hmn = m
    if m > 3 then st = call(unpack(HM, 1, m)) else st = {false} end
  end
  -- The hash's TTL runs a window past the latest state's expiry and is
  -- renewed only when an expiry passes the one it was last set to (field 'e').
  e = st[1]
  e = e and e + 0 or 0
  rescale()

  if n == 1 and k == 1 then
    -- One limit, one request: no table built.
    local ok, rem, reset, retry, wait, x, y, z, exp = layer(1, consume)
    local fx = fixed and fixed[1]
    local delay = 0
    if ok and consume then
      local code, f = V[1], V[6]
      if code == 'swl' then
        write_log(1)
      else
        if code == 'lq' then delay = wait end
        local ttl = nil
        if exp > e then ttl = ceil(exp + V[3]) end
        if fx then
          -- new figures (an edit, or fresh state): written with the state
          local hs = {'HSET', K, f, x, NH[1], V[7]}
          if TWO[code] then
            hs[7], hs[8] = NP[1], y
          elseif code == 'swc' then
            hs[7], hs[8], hs[9], hs[10] = NP[1], y, NM[1], z
          end
          if ttl then
            local h = #hs
            hs[h + 1], hs[h + 2] = 'e', ttl
          end
          call(unpack(hs))
          drop(f, fx, code)
        elseif TWO[code] then
          -- (within a window only the count moves: one field, not two)
          if ttl then
            call('HSET', K, f, x, NP[1], y, 'e', ttl)
          elseif x == st[2] then
            call('HSET', K, NP[1], y)
          else
            call('HSET', K, f, x, NP[1], y)
          end
        elseif code == 'swc' then
          if ttl then
            call('HSET', K, f, x, NP[1], y, NM[1], z, 'e', ttl)
          elseif x == st[2] and z == st[4] then
            call('HSET', K, NP[1], y)
          else
            call('HSET', K, f, x, NP[1], y, NM[1], z)
          end
        elseif ttl then
          call('HSET', K, f, x, 'e', ttl)
        else
          call('HSET', K, f, x)
        end
        if ttl then call('PEXPIRE', K, max(1, ceil((ttl - now) / 1000))) end
      end
    end
    if fx and consume and not ok then keep() end
    local b = ok and 1 or 0
    local a = b
    if V[8] == 1 then a = 1 end -- a shadow limit never rejects
    out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6] = a, delay, b, rem, reset, retry
    o = o + 6
    return
  end

  if k == 1 and not fixed and LOGS == 0 then
    -- Several counter limits, one request, none edited (the common
    -- multi-layer case): one pass decides every layer into out and stages
    -- the fields that change in HS, sent only when every layer admits (all
    -- or nothing), so st stays as read for a rejection's second look. The
    -- general path below (results in R, a write pass, a field pass) runs
    -- 1,072 Lua instructions for a 3-layer decision, this one 666 (counted
    -- by a debug.sethook count hook around the script on a fake Redis);
    -- script time per decision 11.0 -> 8.5 us alternating with the former
    -- script call by call (SCRIPT_AB, load 7).
    local allowed, delay, need, ttl, m, ob = true, 0, e, e, 2, o + 2
    HS[2] = K
    for i = 1, n do
      local ok, rem, reset, retry, wait, x, y, z, exp = layer(i, consume)
      out[ob + 1], out[ob + 2], out[ob + 3], out[ob + 4] = ok and 1 or 0, rem, reset, retry
      ob = ob + 4
      if not ok then
        -- a shadow limit over its limit passes the request and consumes
        -- nothing, as if it had rejected
        if V[8 * i] ~= 1 then allowed = false end
      elseif consume and allowed then
        -- st holds numbers here (layer parsed them): a field whose value
        -- stays is not written (a window's index moves once a window)
        local v, p = 8 * i - 8, POS[i]
        local code = V[v + 1]
        if x ~= st[p] then
          HS[m + 1], HS[m + 2] = V[v + 6], x
          m = m + 2
        end
        if TWO[code] then
          if y ~= st[p + 2] then
            HS[m + 1], HS[m + 2] = NP[i], y
            m = m + 2
          end
        elseif code == 'swc' then
          if y ~= st[p + 2] then
            HS[m + 1], HS[m + 2] = NP[i], y
            m = m + 2
          end
          if z ~= st[p + 3] then
            HS[m + 1], HS[m + 2] = NM[i], z
            m = m + 2
          end
        elseif code == 'lq' and wait > delay then
          delay = wait
        end
        if exp > need then need = exp end
        exp = exp + V[v + 3]
        if exp > ttl then ttl = exp end
      end
    end
    if consume and allowed then
      if need > e then
        ttl = ceil(ttl)
        HS[m + 1], HS[m + 2] = 'e', ttl
        call(unpack(HS, 1, m + 2))
        call('PEXPIRE', K, max(1, ceil((ttl - now) / 1000)))
      elseif m > 2 then
        call(unpack(HS, 1, m))
      end
    elseif consume then
      -- All or nothing: layers that would have admitted report untouched
      -- state.
      delay = 0
      local b = o + 2
      for i = 1, n do
        if out[b + 1] == 1 then
          local ok, rem, reset, retry = layer(i, false)
          out[b + 1], out[b + 2], out[b + 3], out[b + 4] = ok and 1 or 0, rem, reset, retry
        end
        b = b + 4
      end
    end
    out[o + 1], out[o + 2] = allowed and 1 or 0, delay
    o = ob
    return
  end

  -- Several limits with an edit or a sliding log, or k coalesced requests:
  -- each request's results go in R. A coalesced request updates st in place after
  -- each admission, so request j sees requests 1..j-1, and the state is
  -- written once at the end; a single one writes what its layers returned.
  local written, need, ttl = false, e, e
  for j = 1, k do
    local allowed, delay = true, 0
    for i = 1, n do
      local b = 9 * i - 9
      local ok, rem, reset, retry, wait, x, y, z, exp = layer(i, consume)
      R[b + 1], R[b + 2], R[b + 3], R[b + 4], R[b + 5] = ok, rem, reset, retry, wait
      R[b + 6], R[b + 7], R[b + 8], R[b + 9] = x, y, z, exp
      if not ok and V[8 * i] ~= 1 then allowed = false end
    end
    if consume and allowed then
      for i = 1, n do
        local b = 9 * i - 9
        local code = V[8 * i - 7]
        if not R[b + 1] then
          -- a shadow limit over its limit: the request passes, and the
          -- limit consumes nothing, as if it had rejected
        elseif code == 'swl' then
          write_log(i)
        else
          -- st holds numbers here (layer parsed them): a field whose value
          -- stays is not written (a window's index moves once a window)
          local p = pos and pos[i] or 2
          if st[p] ~= R[b + 6] then st[p], DIRTY[p] = R[b + 6], true end
          if TWO[code] then
            if st[p + 2] ~= R[b + 7] then st[p + 2], DIRTY[p + 2] = R[b + 7], true end
          elseif code == 'swc' then
            if st[p + 2] ~= R[b + 7] then st[p + 2], DIRTY[p + 2] = R[b + 7], true end
            if st[p + 3] ~= R[b + 8] then st[p + 3], DIRTY[p + 3] = R[b + 8], true end
          elseif code == 'lq' and R[b + 5] > delay then
            delay = R[b + 5]
          end
          local exp = R[b + 9]
          if exp > need then need = exp end
          exp = exp + V[8 * i - 5]
          if exp > ttl then ttl = exp end
          written = true
        end
      end
    elseif consume then
      -- All or nothing: layers that would have admitted report untouched
      -- state.
      for i = 1, n do
        local b = 9 * i - 9
        if R[b + 1] then
          R[b + 1], R[b + 2], R[b + 3], R[b + 4] = layer(i, false)
        end
      end
    end
    out[o + 1] = allowed and 1 or 0
    out[o + 2] = delay
    o = o + 2
    for i = 1, n do
      local b = 9 * i - 9
      out[o + 1] = R[b + 1] and 1 or 0
      out[o + 2] = R[b + 2]
      out[o + 3] = R[b + 3]
      out[o + 4] = R[b + 4]
      o = o + 4
    end
    if consume and not allowed and j < k then
      -- A rejection changes no state, so the identical requests left are
      -- rejected alike: copy its values (a client past its limit in a
      -- flood costs one evaluation per call, not one per request).
      local w = 2 + 4 * n
      for _ = j + 1, k do
        for x = 1, w do out[o + x] = out[o - w + x] end
        o = o + w
      end
      break
    end
  end
  if not written then
    if fixed and consume then keep() end
    return
  end

  -- One HSET for every counter field that changed (all of a rescaled
  -- limit's), moving the hash's TTL when need passes e.
  local m = 2
  HS[2] = K
  for i = 1, n do
    local code, p = V[8 * i - 7], pos and pos[i] or 2
    -- (a shadow limit that rejected on fresh state has none to write)
    if code ~= 'swl' and st[p] then
      local fx = fixed and fixed[i]
      if fx or DIRTY[p] then
        HS[m + 1], HS[m + 2] = V[8 * i - 2], st[p]
        m = m + 2
      end
      if fx then
        HS[m + 1], HS[m + 2] = NH[i], V[8 * i - 1]
        m = m + 2
      end
      DIRTY[p] = nil
      if TWO[code] or code == 'swc' then
        if fx or DIRTY[p + 2] then
          HS[m + 1], HS[m + 2] = NP[i], st[p + 2]
          m = m + 2
        end
        DIRTY[p + 2] = nil
        if code == 'swc' then
          if fx or DIRTY[p + 3] then
            HS[m + 1], HS[m + 2] = NM[i], st[p + 3]
            m = m + 2
          end
          DIRTY[p + 3] = nil
        end
      end
    end
  end
  if need > e then
    ttl = ceil(ttl)
    HS[m + 1], HS[m + 2] = 'e', ttl
    m = m + 2
    call(unpack(HS, 1, m))
    call('PEXPIRE', K, max(1, ceil((ttl - now) / 1000)))
  elseif m > 2 then
    call(unpack(HS, 1, m))
  end
  if fixed then
    for i, old in pairs(fixed) do drop(V[8 * i - 2], old, V[8 * i - 7]) end
  end
end

local m = tonumber(ARGV[2])
for j = 1, m do
  local a, d = 8 * j - 5, 8 * j - 8
  -- arithmetic converts a numeric argument more cheaply than tonumber
  D[d + 1], D[d + 2], D[d + 3], D[d + 4], D[d + 5], D[d + 6], D[d + 7], D[d + 8] =
    ARGV[a + 1], ARGV[a + 2] + 0, ARGV[a + 3] + 0, ARGV[a + 4] + 0, ARGV[a + 5] + 0, ARGV[a], ARGV[a + 6], ARGV[a + 7] + 0
  local f = ARGV[a]
  DH[j], DP[j], DM[j] = f .. ':#', f .. ':+', f .. ':-'
end

local nargs, nkeys = #ARGV, #KEYS
local p, q = 3 + 8 * m, 1
-- 'u': every request of the call has the mode and limits that follow, and
-- its keys are the next of KEYS
local uniform = ARGV[p] == 'u'
if uniform then p = p + 1 end
-- the previous request's limit list: its position in ARGV, its length, and
-- whether V holds anything but its limits' figures (a charge alters them)
-- or sliding logs (whose positions are keys of that request)
local pp, pn, pv = 0, 0, true
-- steady: a uniform call past its first request, whose limits (no charge,
-- no sliding log) stand in V: each request takes its keys and nothing else
-- (23 of the 270 Lua instructions of a 1-layer decision: 247 now)
local steady = false
while (uniform and q <= nkeys) or (not uniform and p <= nargs) do
  KB, K = q, KEYS[q]
  local logs = 0
  if steady then
    same = true
  else
    local mode = ARGV[p]
    n = ARGV[p + 1] + 0
    consume = mode ~= 'p'
    k = 1
    if consume and mode ~= 'a' and mode ~= 'f' then k = tonumber(mode) end
    same = mode ~= 'f' and not pv and n == pn
    -- (in a uniform call every request's limits are the first's)
    if same and not uniform then
      -- ARGV's strings are interned: comparing them compares pointers
      for i = 2, n + 1 do
        if ARGV[p + i] ~= ARGV[pp + i] then
          same = false
          break
        end
      end
    end
    -- the request's limits into V, counting its sliding logs, each two keys
    -- after its hash
    if not same then
      for i = 1, n do
        local j = ARGV[p + 1 + i] + 0
        local d, v = 8 * j - 8, 8 * i - 8
        V[v + 1], V[v + 2], V[v + 3], V[v + 4], V[v + 5], V[v + 6], V[v + 7], V[v + 8] = D[d + 1], D[d + 2], D[d + 3], D[d + 4], D[d + 5], D[d + 6], D[d + 7], D[d + 8]
        NH[i], NP[i], NM[i] = DH[j], DP[j], DM[j]
        if D[d + 1] == 'swl' then logs = logs + 1 end
        if mode == 'f' then
          -- A charge counts consumption made elsewhere (another region)
          -- whatever remains here: a ceiling no state reaches admits it,
          -- and a bucket's rate, which prices the cost, stays.
          if V[v + 1] == 'tb' or V[v + 1] == 'lb' or V[v + 1] == 'lq' then V[v + 4] = 1e15 else V[v + 2] = 1e15 end
        end
      end
    end
    pp, pn, pv, LOGS = p, n, mode == 'f' or logs > 0, logs
    steady = uniform and not pv
  end
  if not uniform and p == 3 + 8 * m and p + 1 + n >= nargs then
    -- the only request: its error is the script's
    decide()
  else
    local start = o
    local ok, err = pcall(decide)
    if not ok then
      if type(err) ~= 'table' then err = redis.error_reply('ERR ' .. tostring(err)) end
      o = start + 1
      out[o] = err
    end
  end
  if not uniform then p = p + 2 + n end
  q = q + 1 + logs
end
-- Past o: the prefilled values, or those a failed request left past its
-- error.
for i = #out, o + 1, -1 do out[i] = nil end
return out
