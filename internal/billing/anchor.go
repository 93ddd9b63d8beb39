// Package billing holds a developer's billing anchor: the instant their
// quotas renew from (see enforce.Quota), their sign-up unless an operator
// sets another.
package billing

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/internal/audit"
)

// ErrNotFound means no developer has the id (operators have no anchor).
var ErrNotFound = errors.New("developer not found")

// Anchor is a developer's billing anchor as stored and as in effect.
type Anchor struct {
	UserID int64 `json:"user_id"`
	// Set is the operator's anchor, nil when none is set.
	Set *time.Time `json:"billing_anchor"`
	// Effective is when the developer's quotas renew from: Set, else their
	// sign-up.
	Effective time.Time `json:"effective_billing_anchor"`
}

// Beginner starts transactions (a *pgxpool.Pool).
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

const (
	selectAnchor = `
SELECT id, billing_anchor, COALESCE(billing_anchor, created_at)
FROM users WHERE id = $1 AND role = 'developer'`
	lockAnchor = selectAnchor + ` FOR UPDATE`
	setAnchor  = `UPDATE users SET billing_anchor = $2, updated_at = now() WHERE id = $1`
)

// Get returns the anchor of developer userID. Errors: ErrNotFound.
func Get(ctx context.Context, db audit.DBTX, userID int64) (Anchor, error) {
	return scan(db.QueryRow(ctx, selectAnchor, userID), userID)
}

// SetAnchor sets developer userID's billing anchor (nil: back to their
// sign-up), audited as user.set_billing_anchor. The snapshot follows through
// the users table's NOTIFY trigger, so the next request renews by it; the
// current period's count stays (a period that starts elsewhere starts
// afresh). Errors: ErrNotFound.
func SetAnchor(ctx context.Context, db Beginner, actor string, userID int64, anchor *time.Time) (Anchor, error) {
	var after Anchor
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		before, err := scan(tx.QueryRow(ctx, lockAnchor, userID), userID)
		if err != nil {
			return err
		}
		if anchor != nil {
			utc := anchor.UTC().Truncate(time.Microsecond) // what Postgres keeps
			anchor = &utc
		}
		if _, err := tx.Exec(ctx, setAnchor, userID, anchor); err != nil {
			return fmt.Errorf("set billing anchor: %w", err)
		}
		if after, err = scan(tx.QueryRow(ctx, selectAnchor, userID), userID); err != nil {
			return err
		}
		return audit.Record(ctx, tx, actor, "user.set_billing_anchor", audit.ObjectUser, strconv.FormatInt(userID, 10), before, after)
	})
	if err != nil {
		return Anchor{}, fmt.Errorf("billing anchor of user %d: %w", userID, err)
	}
	return after, nil
}

func scan(row pgx.Row, userID int64) (Anchor, error) {
	a := Anchor{UserID: userID}
	if err := row.Scan(&a.UserID, &a.Set, &a.Effective); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return Anchor{}, fmt.Errorf("user %d: %w", userID, ErrNotFound)
		}
		return Anchor{}, fmt.Errorf("read billing anchor: %w", err)
	}
	a.Effective = a.Effective.UTC()
	if a.Set != nil {
		utc := a.Set.UTC()
		a.Set = &utc
	}
	return a, nil
}
