ALTER TABLE plan_limits DROP COLUMN precision;
