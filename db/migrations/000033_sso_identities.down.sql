DROP TABLE IF EXISTS sso_identities;
