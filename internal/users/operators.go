package users

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// ErrLastOperator means the change would leave no operator to run the
// portal: invite another operator first.
var ErrLastOperator = errors.New("the last operator cannot be removed or demoted")

const (
	// Every operator row is locked, so two operators removing each other at
	// once cannot both pass the count and leave none.
	lockOperators  = `SELECT id FROM users WHERE role = 'operator' ORDER BY id FOR UPDATE`
	demoteOperator = `
UPDATE users SET role = 'developer', plan_id = NULL, version = version + 1, updated_at = now()
WHERE id = $1 AND role = 'operator'
RETURNING ` + userColumns
	deleteOperator = `DELETE FROM users WHERE id = $1 AND role = 'operator' RETURNING ` + userColumns
)

// DemoteOperator makes the operator with this id a developer on the default
// plan; their sessions lose the dashboard at their next request. RemoveOperator
// deletes the account, with its operator API tokens. Both refuse with
// ErrLastOperator when no other operator would remain, and must run in the
// caller's transaction (the lock that makes the count hold lasts until it
// ends), where the caller also audits the change.
// Errors: ErrNotFound (no operator has this id), ErrLastOperator.
func (r *Repo) DemoteOperator(ctx context.Context, id int64) (User, error) {
	return r.changeOperator(ctx, id, demoteOperator)
}

// RemoveOperator deletes the operator with this id; see DemoteOperator.
func (r *Repo) RemoveOperator(ctx context.Context, id int64) (User, error) {
	return r.changeOperator(ctx, id, deleteOperator)
}

func (r *Repo) changeOperator(ctx context.Context, id int64, sql string) (User, error) {
	rows, err := r.db.Query(ctx, lockOperators)
	if err != nil {
		return User{}, fmt.Errorf("lock operators: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return User{}, fmt.Errorf("lock operators: %w", err)
	}
	found := false
	for _, o := range ids {
		found = found || o == id
	}
	switch {
	case !found:
		return User{}, fmt.Errorf("operator %d: %w", id, ErrNotFound)
	case len(ids) == 1:
		return User{}, fmt.Errorf("operator %d: %w", id, ErrLastOperator)
	}
	u, err := scanUser(r.db.QueryRow(ctx, sql, id))
	if err != nil {
		return User{}, fmt.Errorf("change operator %d: %w", id, mapError(err))
	}
	return u, nil
}
