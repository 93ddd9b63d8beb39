-- How exactly a tier is enforced across the instances sharing one Redis
-- (issue 34): 'exact' (one atomic decision in Redis per request, as before),
-- 'leased' (an instance decides from a slice of the budget leased from
-- Redis) or 'local' (each instance its share, no Redis). Every existing tier
-- stays exact. A key's overrides are JSON (api_keys.overrides) and carry
-- "precision" there, absent meaning exact.
ALTER TABLE plan_limits ADD COLUMN precision text NOT NULL DEFAULT 'exact'
    CHECK (precision IN ('exact', 'leased', 'local'));
