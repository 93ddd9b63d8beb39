-- Cost after the response (issue 36, item 3): a tier may count only
-- successful responses or only errors, and may take a request's cost from
-- a response header, settled once the response is known.
ALTER TABLE plan_limits
    ADD COLUMN count_when text NOT NULL DEFAULT 'always'
        CHECK (count_when IN ('always', 'success', 'error')),
    ADD COLUMN cost_header text NOT NULL DEFAULT ''
        CHECK (length(cost_header) <= 64);
