// Package audit records who changed what in the control plane, and when, with
// the object's state before and after the change. Callers record inside the
// same transaction as the change itself, so a change and its audit entry are
// committed or rolled back together.
package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Object types accepted by the audit_log table.
const (
	ObjectPlan  = "plan"
	ObjectLimit = "limit"
	ObjectKey   = "key"
	ObjectUser  = "user"
	ObjectToken = "token"
	// ObjectService is a service and its routes (migration 000004).
	ObjectService = "service"
	// ObjectOrg is an organisation (package orgs): members and invitations.
	ObjectOrg = "organisation"
)

// Entry is one recorded change.
type Entry struct {
	ID int64     `json:"id"`
	At time.Time `json:"at"`
	// Actor is who made the change: "user:<id>", "token:<id>", "bootstrap" or
	// "system".
	Actor string `json:"actor"`
	// Action is what happened, e.g. "plan.create", "limit.update", "key.revoke".
	Action     string `json:"action"`
	ObjectType string `json:"object_type"`
	ObjectID   string `json:"object_id"`
	// Before and After are the object as JSON; Before is null for a creation
	// and After is null for a deletion.
	Before json.RawMessage `json:"before"`
	After  json.RawMessage `json:"after"`
}

// DBTX is the part of pgx that audit needs. *pgxpool.Pool, *pgx.Conn and
// pgx.Tx all satisfy it; pass the transaction that makes the change so the
// entry commits with it.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

const insertEntry = `
INSERT INTO audit_log (actor, action, object_type, object_id, before, after)
VALUES ($1, $2, $3, $4, $5, $6)`

// Record writes one audit entry. before and after are marshalled to JSON (a
// json.RawMessage is stored as is); nil stores SQL NULL. Secrets must never be
// part of before or after: pass the redacted domain value.
func Record(ctx context.Context, db DBTX, actor, action, objectType, objectID string, before, after any) error {
	b, err := toJSON(before)
	if err != nil {
		return fmt.Errorf("audit %s: before: %w", action, err)
	}
	a, err := toJSON(after)
	if err != nil {
		return fmt.Errorf("audit %s: after: %w", action, err)
	}
	if _, err := db.Exec(ctx, insertEntry, actor, action, objectType, objectID, b, a); err != nil {
		return fmt.Errorf("audit %s: %w", action, err)
	}
	return nil
}

// toJSON returns nil (SQL NULL) for a nil value so that "no state" is not
// confused with a JSON null document.
func toJSON(v any) ([]byte, error) {
	switch v := v.(type) {
	case nil:
		return nil, nil
	case json.RawMessage:
		if v == nil {
			return nil, nil
		}
		return v, nil
	}
	return json.Marshal(v)
}

// Filter selects audit entries. Zero fields do not filter.
type Filter struct {
	Actor      string
	ObjectType string
	ObjectID   string
	// Since is inclusive, Until exclusive.
	Since time.Time
	Until time.Time
	// Limit caps the number of entries (default 50, at most 500).
	Limit int
	// BeforeID pages backwards: only entries with a smaller id. Pass the last
	// id of the previous page.
	BeforeID int64
}

// Page-size bounds for List.
const (
	DefaultLimit = 50
	MaxLimit     = 500
)

const listEntries = `
SELECT id, at, actor, action, object_type, object_id, before, after
FROM audit_log
WHERE ($1 = '' OR actor = $1)
  AND ($2 = '' OR object_type = $2)
  AND ($3 = '' OR object_id = $3)
  AND ($4::timestamptz IS NULL OR at >= $4)
  AND ($5::timestamptz IS NULL OR at < $5)
  AND ($6 = 0 OR id < $6)
ORDER BY id DESC
LIMIT $7`

// List returns the entries matching f, newest first.
func List(ctx context.Context, db DBTX, f Filter) ([]Entry, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = DefaultLimit
	}
	if limit > MaxLimit {
		limit = MaxLimit
	}
	rows, err := db.Query(ctx, listEntries, f.Actor, f.ObjectType, f.ObjectID,
		optionalTime(f.Since), optionalTime(f.Until), f.BeforeID, limit)
	if err != nil {
		return nil, fmt.Errorf("list audit entries: %w", err)
	}
	entries, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Entry])
	if err != nil {
		return nil, fmt.Errorf("list audit entries: %w", err)
	}
	return entries, nil
}

func optionalTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
