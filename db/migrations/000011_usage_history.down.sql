DROP TABLE shadow_minutes;
DROP TABLE usage_hours;
DROP TABLE usage_minutes;
