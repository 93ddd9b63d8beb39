DROP TABLE signup_confirmations;
