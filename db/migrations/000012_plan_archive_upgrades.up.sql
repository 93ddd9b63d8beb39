-- An archived plan is not offered at sign-up or for new keys; those already
-- on it keep it (and its limits keep enforcing) until moved. Restoring clears
-- the mark.
ALTER TABLE plans ADD COLUMN archived_at timestamptz;

-- Whose state a tier counts: 'key' (each API key on its own) or 'developer'
-- (all of a developer's keys together). '' is the usual rule: per key for a
-- per-endpoint tier, per developer for a plan-wide one.
ALTER TABLE plan_limits ADD COLUMN count_per text NOT NULL DEFAULT ''
    CHECK (count_per IN ('', 'key', 'developer'));

-- A developer asks to move to a public plan; an operator approves (the
-- developer moves to the plan) or refuses. At most one request per developer
-- is pending at a time.
CREATE TABLE plan_upgrade_requests (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id     bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    plan_id     bigint NOT NULL REFERENCES plans (id) ON DELETE CASCADE,
    from_plan   text NOT NULL DEFAULT '',
    status      text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'approved', 'refused')),
    note        text NOT NULL DEFAULT '' CHECK (char_length(note) <= 500),
    created_at  timestamptz NOT NULL DEFAULT now(),
    decided_at  timestamptz,
    decided_by  text NOT NULL DEFAULT ''
);
CREATE UNIQUE INDEX plan_upgrade_requests_one_pending ON plan_upgrade_requests (user_id) WHERE status = 'pending';
CREATE INDEX plan_upgrade_requests_user ON plan_upgrade_requests (user_id, created_at DESC);
