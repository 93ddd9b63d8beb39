DROP TABLE plan_upgrade_requests;
ALTER TABLE plan_limits DROP COLUMN count_per;
ALTER TABLE plans DROP COLUMN archived_at;
