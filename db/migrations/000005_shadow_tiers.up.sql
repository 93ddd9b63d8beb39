-- Shadow tiers: decided and counted on every request, never enforced.
ALTER TABLE plan_limits DROP CONSTRAINT plan_limits_mode_check;
ALTER TABLE plan_limits ADD CONSTRAINT plan_limits_mode_check
    CHECK (mode IN ('reject', 'queue', 'degrade', 'shadow'));
