DROP TABLE IF EXISTS consumer_days;
DROP TABLE IF EXISTS traffic_days;
DROP TABLE IF EXISTS traffic_hours;
