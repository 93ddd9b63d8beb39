DROP TABLE signin_failures;
DROP TABLE sessions;
