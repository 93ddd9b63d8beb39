DROP TABLE service_tokens;
DROP TABLE service_routes;
DROP TABLE services;
DELETE FROM audit_log WHERE object_type = 'service';
ALTER TABLE audit_log DROP CONSTRAINT audit_log_object_type_check;
ALTER TABLE audit_log ADD CONSTRAINT audit_log_object_type_check
    CHECK (object_type IN ('plan', 'limit', 'key', 'user', 'token'));
