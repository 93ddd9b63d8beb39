ALTER TABLE meter_records DROP COLUMN units;
DROP TABLE usage_tier_units;
ALTER TABLE plan_limits DROP COLUMN cost_header, DROP COLUMN count_when;
