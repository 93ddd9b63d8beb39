DROP TABLE IF EXISTS request_log_days;
DROP TABLE IF EXISTS request_log;
