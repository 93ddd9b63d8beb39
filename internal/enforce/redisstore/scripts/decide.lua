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
--             its state there, in one record per limit
--   KEYS[q+j]  the j-th sliding log's hash (see LOG below)
-- Records: limit field F's state is the field F..'@'..<its figures>, its
-- value packed doubles in the layout of record.lua, which Redis runs ahead
-- of this body (its TWO, pack, sunpack, decode, encode, drop_fields and
-- struct_lib are used here): a bucket's virtual finish time (tat); a fixed
-- window's index and count; a sliding counter's index, current and previous
-- counts; a quota's period start and count; and last, the record's TTL
-- mark, the TTL (us) the hash was given when the record was last written,
-- so the hash's TTL moves only when a state outlives its mark. A
-- limit edited in place finds no record under its new name (load): the
-- state of its record under the former figures is rescaled to the new ones
-- as rescale in algorithm.go does, and written back under them with the
-- next admitted request, when the former record is deleted. The same path
-- reads the layout before records (fields F, F..':+', F..':-', F..':#' and
-- 'e', testdata/decide_main.lua) and replaces it, so a
-- deploy loses no count. (Plan limit names hold no ':' or '@', so no
-- limit's field is another's.) Requires Redis >= 7.0 (PEXPIRE GT, NX).
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
-- all of a request's counter states are read with one HGET or HMGET and
-- written with one HSET, a TTL is set only when the hash's expiry must move
-- (a PEXPIRE costs more than the HSET), and states are packed doubles,
-- which spare the %.17g formatting (about 2,000 instructions of snprintf)
-- that Redis 7.0 spends on each Lua number given to redis.call, and the
-- strtod reading them back.

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

-- fixed[i] is set when limit i's record was missing: its state was read
-- from a record of other figures, from the fields of the layout before
-- records (see old), or is none; rescale has rewritten it in st as a state
-- of the limit's figures, which a decision that consumes writes back, as a
-- record of its own, even when it rejects (see rescale in algorithm.go).
-- PREV[i] then says what to delete once it is written: 1 for the former
-- layout's fields, or the figures of the record it came from.
local KB, K, n, consume, k, st, pos, fixed
-- VW is the longest window of the request's limits.
local VW = 0
-- LOGS counts the request's sliding logs.
local LOGS = 0
-- same is set when the request's limits are the previous request's (a
-- batch of one plan's requests, the common case): its V, and for several
-- limits the HMGET's field list (HM, hmn entries long) and POS, stand.
local same, hmn
-- NR holds the current request's limits' record names F@<figures>, built
-- once per call per limit (DR): a concatenation hashes its result. ST (st), E, HM, HS, POS, PREV and DIRTY
-- are reused by every request: st holds four values per counter limit from
-- pos[i] on (the state a, the figures it is of, y and z), E[pos[i]] the
-- record's TTL mark, and DIRTY[p] marks a state that changed, to be
-- written.
local NR, DR, POS, PREV, DIRTY, ST, E = {}, {}, {}, {}, {}, {}, {}
local HM = {'HMGET', nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil}
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
-- the oldest), and 'm' the metadata, seven 7-byte numbers: h, o (the head
-- entry's offset, 1-based, in chunk h, or in 't' when h = s), s, n (the
-- cost logged from the head on), z (the newest entry's time), a (the head
-- entry's time), x (when the log's TTL runs out; see write_log). 10,000 requests a minute take about 9 bytes each
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

local function pack_meta(h, o, s, n, z, a, x)
  return be7(h) .. be7(o) .. be7(s) .. be7(n) .. be7(z) .. be7(a) .. be7(x)
end

-- unmeta returns the metadata's six numbers and x, the log's TTL mark
-- (us): when the TTL last set runs out, 0 in metadata without one (the
-- script's former six numbers, which it reads as it wrote them).
local function unmeta(m)
  local x = 0
  if #m >= 49 then x = d7(m, 43) end
  return d7(m, 1), d7(m, 8), d7(m, 15), d7(m, 22), d7(m, 29), d7(m, 36), x
end

-- With struct (Redis's Lua, not miniredis), the same bytes in C: a logged
-- request's metadata write and read took some 170 Lua instructions in
-- be7 and d7.
if struct_lib then
  local pk, up = struct_lib.pack, struct_lib.unpack
  pack_entry = function(ts, c)
    if c >= 1 and c <= 255 and c % 1 == 0 then return pk('>I7B', ts, c) end
    return pk('>I7BBI7', ts, 0, 0, c)
  end
  pack_meta = function(h, o, s, n, z, a, x)
    return pk('>I7I7I7I7I7I7I7', h, o, s, n, z, a, x)
  end
  unmeta = function(m)
    local h, o, s, n, z, a = up('>I7I7I7I7I7I7', m)
    local x = 0
    if #m >= 49 then x = up('>I7', m, 43) end
    return h, o, s, n, z, a, x
  end
end

-- load puts in st at p the state of counter limit i, whose record is
-- missing (a new subject, an edited limit, a hash the script's former
-- layout wrote), from where it was before, as read: rescale then makes it
-- a state of the limit's figures.
local function load(i, p)
  -- The hash's fields (a few, but one per key of a PerKey limit; this
  -- path runs once a limit's figures change, not per request) hold the
  -- limit's record under its former figures, F@<figures>, if any; failing
  -- that, F is the layout before records (F, F:+, F:-, F:#), whose state
  -- goes on as it was (a deploy loses no count).
  local f = V[8 * i - 2]
  E[p] = 0
  fixed = fixed or {}
  fixed[i] = true
  PREV[i] = nil
  st[p], st[p + 1], st[p + 2], st[p + 3] = false, nil, nil, nil
  local pre = f .. '@'
  local np, former = #pre, false
  for _, key in ipairs(call('HKEYS', K)) do
    if sub(key, 1, np) == pre then
      local fig = sub(key, np + 1)
      local a, y, z = decode(string.match(fig, '^(%a+):'), call('HGET', K, key))
      st[p], st[p + 1], st[p + 2], st[p + 3] = a, fig, y, z
      PREV[i] = fig
      return
    end
    if key == f then former = true end
  end
  if former then
    local r = call('HMGET', K, f .. ':#', f, f .. ':+', f .. ':-')
    PREV[i] = 1
    st[p], st[p + 1], st[p + 2], st[p + 3] = r[2], r[1], r[3], r[4]
  end
end

-- rescale rewrites in st, as numbers and a state of the limit's figures,
-- the state of every counter limit in fixed (whose record was missing), as
-- rescale in algorithm.go does when it was stored under other figures.
local function rescale()
  for i in pairs(fixed) do
    local v = 8 * i - 8
    local p = pos and pos[i] or 2
    local code = V[v + 1]
    local fig, W, L = st[p + 1], V[v + 3], V[v + 2]
    local a, y0, z0 = tonumber(st[p]), tonumber(st[p + 2]), tonumber(st[p + 3])
    if fig == V[v + 7] then
      -- the layout before records, under these figures: as it is
    elseif fig then
      local oc, ow, ol = string.match(fig, '^(%a+):(%d+):(%d+):')
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
      st[p + 2], st[p + 3] = a and y0 or false, nil
    elseif code == 'swc' then
      st[p + 2], st[p + 3] = a and y0 or false, a and z0 or false
    else
      st[p + 2], st[p + 3] = nil, nil
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
    -- numbers: a record's, or those rescale converted
    local p = pos and pos[i] or 2
    a, y0, z0 = st[p], st[p + 2], st[p + 3]
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
  local h, o, s, sum, z, a0, x = 0, 1, 0, 0, 0, 0, 0
  if r[1] then h, o, s, sum, z, a0, x = unmeta(r[1]) end
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
  lg[1], lg[2], lg[3], lg[4], lg[5], lg[6], lg[7], lg[8] = h0, h, o, s, sum, a0, tail, x
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
  local h0, h, o, s, sum, a0, tail, x = lg[1], lg[2], lg[3], lg[4], lg[5], lg[6], lg[7], lg[8]
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
  -- The log must live a window past its newest entry: its TTL is set an
  -- eighth of a window longer than that, and moved only once the mark x
  -- (when it runs out) no longer covers it, so at most once an eighth of a
  -- window rather than on every request.
  local move = now + W > x
  if move then x = now + W + ceil(W / 8) end
  call('HSET', lk, 't', tail, 'm', pack_meta(h, o, s, sum + c, now, a0, x))
  if move then call('PEXPIRE', lk, max(1, ceil((x - now) / 1000))) end
end

-- put stages in HS from m on limit i's record of state x, y, z and TTL
-- mark e, and returns the new end of HS. A limit whose record was missing
-- has what it was read from deleted (so an edited tier keeps one record).
local function put(m, i, x, y, z, e)
  HS[m + 1], HS[m + 2] = NR[i], encode(V[8 * i - 7], x, y, z, e)
  m = m + 2
  if fixed and fixed[i] then
    local pv = PREV[i]
    if pv == 1 then
      drop_fields(K, V[8 * i - 2])
    elseif pv then
      call('HDEL', K, V[8 * i - 2] .. '@' .. pv)
    end
    PREV[i] = nil
  end
  return m
end

-- expire moves the hash's TTL to ttl (us) unless it runs later already.
-- fresh says a record written was missing, and the hash may be new: a key
-- without a TTL is one GT never sets (Redis >= 7.0 for both flags).
local function expire(ttl, fresh)
  local ms = max(1, ceil((ttl - now) / 1000))
  if fresh and call('PEXPIRE', K, ms, 'NX') == 1 then return end
  call('PEXPIRE', K, ms, 'GT')
end

-- keep writes back, after a rejection, the rescaled states noted in fixed,
-- moving the hash's TTL as a write of them would.
local function keep()
  local ttl = 0
  for i in pairs(fixed) do
    local v = 8 * i - 8
    local code, W, p = V[v + 1], V[v + 3], pos and pos[i] or 2
    local a = tonumber(st[p])
    if a then
      local exp = a
      if TWO[code] then
        exp = (a + 1) * W
        if code ~= 'fw' then exp = a + W end -- a quota's start and span
      elseif code == 'swc' then
        exp = (a + 2) * W
      end
      if exp + W > ttl then ttl = exp + W end
    end
  end
  if ttl == 0 then return end
  ttl = ceil(ttl)
  local m = 2
  HS[2] = K
  for i in pairs(fixed) do
    local p = pos and pos[i] or 2
    local a = tonumber(st[p])
    if a then m = put(m, i, a, tonumber(st[p + 2]), tonumber(st[p + 3]), ttl) end
  end
  call(unpack(HS, 1, m))
  expire(ttl, true)
end

-- decide decides the current request and appends its values to out. It is
-- one function, not several: Redis runs the script's body on every call, so
-- every function defined here is a closure built per call.
local function decide()
  -- Read every counter limit's record with one HGET (one limit, the common
  -- case, which builds no table: its state is at 2) or HMGET into st, at
  -- pos[i] for limit i (a sliding log's pos[i] is its key's index).
  fixed = nil
  st = ST
  if n == 1 then
    pos = nil
    local code = V[1]
    if code ~= 'swl' then
      -- (decode inlined here and below: two Lua calls a limit)
      local r = call('HGET', K, NR[1])
      if not r then
        load(1, 2)
      elseif code == 'swc' then
        st[2], st[4], st[5], E[2] = sunpack('<dddd', r)
      elseif TWO[code] then
        st[2], st[4], E[2] = sunpack('<ddd', r)
        st[5] = nil
      else
        st[2], E[2] = sunpack('<dd', r)
        st[4], st[5] = nil, nil
      end
    end
  else
    pos = POS
    if not same then
      -- m counts HM's entries: the length operator costs a search per use.
      local m, l = 2, 0
      for i = 1, n do
        if V[8 * i - 7] == 'swl' then
          l = l + 1
          POS[i] = KB + l
        else
          POS[i] = 4 * i - 2
          m = m + 1
          HM[m] = NR[i]
        end
      end
      hmn = m
    end
    if hmn > 2 then
      HM[2] = K
      local r = call(unpack(HM, 1, hmn))
      local c = 0
      for i = 1, n do
        local code = V[8 * i - 7]
        if code ~= 'swl' then
          c = c + 1
          local rr, p = r[c], POS[i]
          if not rr then
            load(i, p)
          elseif code == 'swc' then
            st[p], st[p + 2], st[p + 3], E[p] = sunpack('<dddd', rr)
          elseif TWO[code] then
            st[p], st[p + 2], E[p] = sunpack('<ddd', rr)
            st[p + 3] = nil
          else
            st[p], E[p] = sunpack('<dd', rr)
            st[p + 2], st[p + 3] = nil, nil
          end
        end
      end
    end
  end
  if fixed then rescale() end

  -- The hash's TTL runs a window past the latest state's expiry. Each
  -- record carries the TTL last set when it was written (its mark, E), and
  -- the TTL moves, with PEXPIRE GT, only when a state written expires past
  -- its record's mark: a PEXPIRE costs more than the HSET.
  if n == 1 and k == 1 then
    -- One limit, one request: no table built.
    local ok, rem, reset, retry, wait, x, y, z, exp = layer(1, consume)
    local fx = fixed and fixed[1]
    local delay = 0
    if ok and consume then
      if V[1] == 'swl' then
        write_log(1)
      else
        if V[1] == 'lq' then delay = wait end
        local e, ttl = E[2], nil
        if exp > e then
          ttl = ceil(exp + V[3])
          e = ttl
        end
        if fx then
          HS[2] = K
          call(unpack(HS, 1, put(2, 1, x, y, z, e)))
        else
          call('HSET', K, NR[1], encode(V[1], x, y, z, e))
        end
        if ttl then expire(ttl, fx) end
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
    -- the records that change in HS, sent only when every layer admits
    -- (all or nothing), so st stays as read for a rejection's second look.
    -- A record whose state outlives its mark is marked a window (the
    -- request's longest, VW) past it, and the hash's TTL moves to the
    -- latest such mark, ttl.
    local allowed, delay, ttl, m, ob = true, 0, 0, 2, o + 2
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
        local v, p = 8 * i - 8, POS[i]
        local code, e = V[v + 1], E[p]
        if exp > e then
          e = ceil(exp + VW)
          if e > ttl then ttl = e end
        end
        -- (a record whose state and mark stay is not written; encode
        -- inlined, a Lua call a record)
        if e ~= E[p] or x ~= st[p] or y ~= st[p + 2] or z ~= st[p + 3] then
          if code == 'swc' then
            HS[m + 2] = pack('<dddd', x, y, z, e)
          elseif TWO[code] then
            HS[m + 2] = pack('<ddd', x, y, e)
          else
            HS[m + 2] = pack('<dd', x, e)
          end
          HS[m + 1] = NR[i]
          m = m + 2
        end
        if code == 'lq' and wait > delay then delay = wait end
      end
    end
    if consume and allowed then
      if m > 2 then call(unpack(HS, 1, m)) end
      if ttl > 0 then expire(ttl, false) end
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
  local written, move, ttl = false, false, 0
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
          -- st holds numbers here (layer parsed them): a record whose
          -- state and mark stay is not written
          local p = pos and pos[i] or 2
          if st[p] ~= R[b + 6] then st[p], DIRTY[p] = R[b + 6], true end
          if st[p + 2] ~= R[b + 7] then st[p + 2], DIRTY[p] = R[b + 7], true end
          if st[p + 3] ~= R[b + 8] then st[p + 3], DIRTY[p] = R[b + 8], true end
          if code == 'lq' and R[b + 5] > delay then delay = R[b + 5] end
          local exp = R[b + 9]
          if exp > E[p] then move, DIRTY[p] = true, true end
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

  -- One HSET for every record that changed (every one that was missing),
  -- marked with the TTL it moves to, if it moves.
  local m, e, fresh = 2, nil, false
  if move then
    ttl = ceil(ttl)
    e = ttl
  end
  HS[2] = K
  for i = 1, n do
    local p = pos and pos[i] or 2
    -- (a shadow limit that rejected on fresh state has none to write)
    if V[8 * i - 7] ~= 'swl' and st[p] then
      local fx = fixed and fixed[i]
      if fx or DIRTY[p] then
        m = put(m, i, st[p], st[p + 2], st[p + 3], e or E[p])
        if fx then fresh = true end
      end
      DIRTY[p] = nil
    end
  end
  if m > 2 then call(unpack(HS, 1, m)) end
  if move then expire(ttl, fresh) end
end

local m = tonumber(ARGV[2])
for j = 1, m do
  local a, d = 8 * j - 5, 8 * j - 8
  -- arithmetic converts a numeric argument more cheaply than tonumber
  D[d + 1], D[d + 2], D[d + 3], D[d + 4], D[d + 5], D[d + 6], D[d + 7], D[d + 8] =
    ARGV[a + 1], ARGV[a + 2] + 0, ARGV[a + 3] + 0, ARGV[a + 4] + 0, ARGV[a + 5] + 0, ARGV[a], ARGV[a + 6], ARGV[a + 7] + 0
  local f = ARGV[a]
  DR[j] = f .. '@' .. ARGV[a + 6]
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
      VW = 0
      for i = 1, n do
        local j = ARGV[p + 1 + i] + 0
        local d, v = 8 * j - 8, 8 * i - 8
        if D[d + 3] > VW then VW = D[d + 3] end
        V[v + 1], V[v + 2], V[v + 3], V[v + 4], V[v + 5], V[v + 6], V[v + 7], V[v + 8] = D[d + 1], D[d + 2], D[d + 3], D[d + 4], D[d + 5], D[d + 6], D[d + 7], D[d + 8]
        NR[i] = DR[j]
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
