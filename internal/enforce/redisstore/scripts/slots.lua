-- slots.lua: the concurrency limits' slots, one sorted set per limit (and
-- key, for a per-key limit) of the lease ids holding a slot, each scored by
-- the lease's expiry in microseconds. All of one operation's keys are under
-- its subject's hash tag, so each operation covers a request's concurrency
-- limits atomically. slots_memory.go runs the same rules.
--
-- One call runs a batch of operations (the store sends every operation
-- queued meanwhile in one call, as it does decisions), one after the other,
-- each exactly as a call of its own would.
--
-- ARGV[1]  now in microseconds, or '' to read Redis TIME once (tests set it)
-- then per operation, from ARGV[p]:
--   ARGV[p]    'a' acquires (all or nothing), 'p' counts (Peek), 'r'
--              releases, 'n' renews
--   ARGV[p+1]  the lease id
--   ARGV[p+2]  the lease in microseconds
--   ARGV[p+3]  n, the number of the operation's keys, the next n KEYS
--   ARGV[p+4 .. p+3+n]  each key's limit, negative for a shadow limit
--              (which refuses nothing and, when full, holds no slot); 0
--              for 'r'; for 'n', when the lease runs out by its holder's
--              count (us)
--
-- Returns {now, then per operation: allowed, then per key: has a slot, in
-- flight}; in flight counts the live leases, this one included when it was
-- taken ('r' answers 1 and zeros, 'n' has a slot 1 where the lease was
-- renewed). Expired leases are dropped before counting, so a crashed
-- holder's slots come back one lease after its last renewal. A renewal
-- puts back a lease Redis lost (restarted empty) while its holder's count
-- says it is live, so the requests still running are counted again.
-- Every key written gets a TTL a second past its latest lease.

local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local out = {now}

local function keep(key, ttl)
  if redis.call('PTTL', key) < ttl then
    redis.call('PEXPIRE', key, ttl)
  end
end

local p, q = 2, 1
while p <= #ARGV do
  local op, id, lease, n = ARGV[p], ARGV[p + 1], tonumber(ARGV[p + 2]), tonumber(ARGV[p + 3])
  local expires = now + lease
  local ttl = math.floor(lease / 1000) + 1000
  local at = #out + 1
  out[at] = 1
  if op == 'r' then
    for i = 0, n - 1 do
      redis.call('ZREM', KEYS[q + i], id)
      out[#out + 1] = 0
      out[#out + 1] = 0
    end
  elseif op == 'n' then
    for i = 0, n - 1 do
      -- Only a lease still live is renewed: an expired one's slot may be
      -- another's by now. A live lease that is missing was lost with
      -- Redis's data: it is put back.
      local score = redis.call('ZSCORE', KEYS[q + i], id)
      local live
      if score then
        live = tonumber(score) > now
      else
        live = tonumber(ARGV[p + 4 + i]) > now
      end
      if live then
        redis.call('ZADD', KEYS[q + i], expires, id)
        keep(KEYS[q + i], ttl)
      end
      out[#out + 1] = live and 1 or 0
      out[#out + 1] = 0
    end
  else
    local has = {}
    for i = 0, n - 1 do
      local limit = tonumber(ARGV[p + 4 + i])
      local shadow = limit < 0
      if shadow then limit = -limit end
      local key = KEYS[q + i]
      redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
      local count = redis.call('ZCARD', key)
      has[i] = count < limit
      if not has[i] and not shadow then
        out[at] = 0
      end
      out[#out + 1] = has[i] and 1 or 0
      out[#out + 1] = count
    end
    if op == 'a' and out[at] == 1 then
      for i = 0, n - 1 do
        if has[i] then
          redis.call('ZADD', KEYS[q + i], expires, id)
          keep(KEYS[q + i], ttl)
          out[at + 2 + 2 * i] = out[at + 2 + 2 * i] + 1
        end
      end
    end
  end
  p = p + 4 + n
  q = q + n
end
return out
