ALTER TABLE plan_limits DROP COLUMN cost_header, DROP COLUMN count_when;
