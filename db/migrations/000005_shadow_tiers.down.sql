-- Shadow tiers become enforced ones before the mode is refused again.
UPDATE plan_limits SET mode = 'reject' WHERE mode = 'shadow';
ALTER TABLE plan_limits DROP CONSTRAINT plan_limits_mode_check;
ALTER TABLE plan_limits ADD CONSTRAINT plan_limits_mode_check
    CHECK (mode IN ('reject', 'queue', 'degrade'));
