DROP TABLE IF EXISTS alert_delivery_attempts;
DROP TABLE IF EXISTS alert_deliveries;
DROP TABLE IF EXISTS alert_firings;
DROP TABLE IF EXISTS alert_webhooks;
DROP TABLE IF EXISTS alert_rules;
