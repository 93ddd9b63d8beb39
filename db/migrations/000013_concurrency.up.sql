-- Concurrency tiers: at most limit requests in flight (window_ms is then
-- unused and kept at a minute; cost is 1).
ALTER TABLE plan_limits DROP CONSTRAINT plan_limits_algorithm_check;
ALTER TABLE plan_limits ADD CONSTRAINT plan_limits_algorithm_check
    CHECK (algorithm IN ('fixed_window', 'sliding_window_log', 'sliding_window_counter',
                         'token_bucket', 'leaky_bucket', 'quota', 'concurrency'));
