package users

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Disabling a developer stops every key of theirs at once, everywhere (the
// enforcement snapshot leaves out a disabled developer's keys and rebuilds
// on the users table's NOTIFY); enabling them again restores the keys as
// they were. Operators cannot be disabled this way.
const (
	setDisabled = `
UPDATE users SET disabled_at = CASE WHEN $2 THEN COALESCE(disabled_at, now()) END
WHERE id = $1 AND role = 'developer'
RETURNING disabled_at`
	selectDisabled = `SELECT id, disabled_at FROM users WHERE id = ANY($1) AND disabled_at IS NOT NULL`
)

// SetDisabled disables (true) or enables (false) the developer with this id
// and returns since when they are disabled (nil when enabled). Run it in the
// caller's transaction to audit it atomically.
// Errors: ErrNotFound (no such developer).
func (r *Repo) SetDisabled(ctx context.Context, id int64, disabled bool) (*time.Time, error) {
	var since *time.Time
	err := r.db.QueryRow(ctx, setDisabled, id, disabled).Scan(&since)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("developer %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("set developer %d disabled: %w", id, err)
	}
	return since, nil
}

// DisabledSince returns, for those of ids that are disabled, since when.
func (r *Repo) DisabledSince(ctx context.Context, ids []int64) (map[int64]time.Time, error) {
	rows, err := r.db.Query(ctx, selectDisabled, ids)
	if err != nil {
		return nil, fmt.Errorf("disabled developers: %w", err)
	}
	out := map[int64]time.Time{}
	var id int64
	var at time.Time
	if _, err := pgx.ForEachRow(rows, []any{&id, &at}, func() error { out[id] = at; return nil }); err != nil {
		return nil, fmt.Errorf("disabled developers: %w", err)
	}
	return out, nil
}
