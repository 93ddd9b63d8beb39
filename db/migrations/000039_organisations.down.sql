-- Keys, plans and counters never moved (they stay the account's), so
-- dropping the organisations loses only memberships and invitations.
DELETE FROM audit_log WHERE object_type = 'organisation';
ALTER TABLE audit_log DROP CONSTRAINT audit_log_object_type_check;
ALTER TABLE audit_log ADD CONSTRAINT audit_log_object_type_check
    CHECK (object_type IN ('plan', 'limit', 'key', 'user', 'token', 'service'));
DROP TRIGGER IF EXISTS users_personal_organisation ON users;
DROP FUNCTION IF EXISTS personal_organisation();
DROP TABLE IF EXISTS org_invitations;
DROP TABLE IF EXISTS org_members;
DROP TABLE IF EXISTS organisations;
