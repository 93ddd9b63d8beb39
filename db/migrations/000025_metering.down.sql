DROP TABLE IF EXISTS meter_periods;
DROP TABLE IF EXISTS meter_records;
