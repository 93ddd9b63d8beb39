-- slots.lua: the concurrency limits' slots, one sorted set per limit (and
-- key, for a per-key limit) of the lease ids holding a slot, each scored by
-- the lease's expiry in microseconds. Every key is under the subject's hash
-- tag, so one call covers all of a request's concurrency limits atomically.
-- slots_memory.go runs the same rules.
--
-- ARGV[1]  'a' acquires (all or nothing), 'p' counts (Peek), 'r' releases,
--          'n' renews
-- ARGV[2]  now in microseconds, or '' to read Redis TIME (tests set it)
-- ARGV[3]  the lease id
-- ARGV[4]  the lease in microseconds
-- ARGV[4+i]  KEYS[i]'s limit, negative for a shadow limit (which refuses
--          nothing and, when full, holds no slot); 'a' and 'p' only
--
-- 'a' and 'p' return {now, allowed, then per key: has a slot, in flight};
-- in flight counts the live leases, this one included when it was taken.
-- 'r' and 'n' return {now}. Expired leases are dropped before counting,
-- so a crashed holder's slots come back one lease after its last renewal.

local now
if ARGV[2] ~= '' then
  now = tonumber(ARGV[2])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local op, id, lease = ARGV[1], ARGV[3], tonumber(ARGV[4])
local expires = now + lease
-- The set outlives its latest lease by a second, in whole milliseconds.
local ttl = math.floor(lease / 1000) + 1000

if op == 'r' then
  for i = 1, #KEYS do
    redis.call('ZREM', KEYS[i], id)
  end
  return {now}
end

if op == 'n' then
  for i = 1, #KEYS do
    -- Only a lease still live is renewed: an expired one's slot may be
    -- another's by now.
    local score = redis.call('ZSCORE', KEYS[i], id)
    if score and tonumber(score) > now then
      redis.call('ZADD', KEYS[i], 'XX', expires, id)
      if redis.call('PTTL', KEYS[i]) < ttl then
        redis.call('PEXPIRE', KEYS[i], ttl)
      end
    end
  end
  return {now}
end

local out = {now, 1}
local has = {}
for i = 1, #KEYS do
  local limit = tonumber(ARGV[4 + i])
  local shadow = limit < 0
  if shadow then limit = -limit end
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
  local n = redis.call('ZCARD', KEYS[i])
  has[i] = n < limit
  if not has[i] and not shadow then
    out[2] = 0
  end
  out[#out + 1] = has[i] and 1 or 0
  out[#out + 1] = n
end
if op == 'a' and out[2] == 1 then
  for i = 1, #KEYS do
    if has[i] then
      redis.call('ZADD', KEYS[i], expires, id)
      if redis.call('PTTL', KEYS[i]) < ttl then
        redis.call('PEXPIRE', KEYS[i], ttl)
      end
      out[2 + 2 * i] = out[2 + 2 * i] + 1
    end
  end
end
return out
