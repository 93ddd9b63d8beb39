DROP TABLE key_expiry_notices;
