-- The ledger of quota consumption (package ledger): per subject, quota tier,
-- scope (the API key of a per-key quota, else '') and period, the cost units
-- admitted. Redis holds a fast copy of each count; when Redis loses it, the
-- count is rebuilt from here. Instances add to a row (additive upserts), so
-- any number of them sum exactly. Rows are pruned a day after their period
-- ends.
CREATE TABLE quota_ledger (
    subject      text        NOT NULL,
    quota        text        NOT NULL,
    scope        text        NOT NULL DEFAULT '',
    period_start timestamptz NOT NULL,
    period_end   timestamptz NOT NULL CHECK (period_end > period_start),
    used         bigint      NOT NULL,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (subject, quota, scope, period_start)
);
CREATE INDEX quota_ledger_period_end ON quota_ledger (period_end);
