package plans

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluicehq/sluice/internal/audit"
	"github.com/sluicehq/sluice/internal/pgtext"
)

// Upgrade request statuses.
const (
	UpgradePending  = "pending"
	UpgradeApproved = "approved"
	UpgradeRefused  = "refused"
)

// MaxUpgradeNoteLen bounds the note an operator gives with a decision.
const MaxUpgradeNoteLen = 500

// ErrUpgradePending means the developer already has a request waiting for
// an operator; only one at a time.
var ErrUpgradePending = errors.New("an upgrade request is already pending")

// UpgradeRequest is a developer's request to move to another public plan,
// and what an operator decided.
type UpgradeRequest struct {
	ID     int64  `json:"id" db:"id"`
	UserID int64  `json:"user_id" db:"user_id"`
	Email  string `json:"email" db:"email"`
	PlanID int64  `json:"plan_id" db:"plan_id"`
	// PlanName is the requested plan's name; FromPlan the name of the plan
	// the developer was on when asking.
	PlanName  string     `json:"plan_name" db:"plan_name"`
	FromPlan  string     `json:"from_plan" db:"from_plan"`
	Status    string     `json:"status" db:"status"`
	Note      string     `json:"note" db:"note"`
	CreatedAt time.Time  `json:"created_at" db:"created_at"`
	DecidedAt *time.Time `json:"decided_at" db:"decided_at"`
	DecidedBy string     `json:"decided_by" db:"decided_by"`
}

const selectUpgrades = `
SELECT r.id, r.user_id, u.email, r.plan_id, p.name AS plan_name, r.from_plan, r.status, r.note,
       r.created_at, r.decided_at, r.decided_by
FROM plan_upgrade_requests r JOIN users u ON u.id = r.user_id JOIN plans p ON p.id = r.plan_id`

func queryUpgrades(ctx context.Context, db audit.DBTX, tail string, args ...any) ([]UpgradeRequest, error) {
	rows, err := db.Query(ctx, selectUpgrades+" "+tail, args...)
	if err != nil {
		return nil, fmt.Errorf("select upgrade requests: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[UpgradeRequest])
	if err != nil {
		return nil, fmt.Errorf("select upgrade requests: %w", err)
	}
	return out, nil
}

// UpgradeChoices are the plans a developer on plan current (its id) may ask
// for: public, not archived, not the anonymous plan, not current.
func UpgradeChoices(all []Plan, current int64) []Plan {
	var out []Plan
	for _, p := range all {
		if p.IsPublic && p.Offered() && !p.IsAnonymous && p.ID != current {
			out = append(out, p)
		}
	}
	return out
}

const (
	// The developer's effective plan: their own, else the default.
	selectEffectivePlan = `
SELECT p.id, p.name FROM users u
JOIN plans p ON p.id = COALESCE(u.plan_id, (SELECT id FROM plans WHERE is_default))
WHERE u.id = $1 AND u.role = 'developer'`
	insertUpgrade = `
INSERT INTO plan_upgrade_requests (user_id, plan_id, from_plan) VALUES ($1, $2, $3) RETURNING id`
)

// RequestUpgrade records that developer userID asks to move to plan planID,
// which must be among UpgradeChoices; audited as upgrade.request.
// Errors: *ValidationError (field "plan_id"), ErrUpgradePending, ErrNotFound
// (no such developer).
func (s *Service) RequestUpgrade(ctx context.Context, userID, planID int64) (UpgradeRequest, error) {
	var req UpgradeRequest
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var currentID int64
		var currentName string
		err := tx.QueryRow(ctx, selectEffectivePlan, userID).Scan(&currentID, &currentName)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			// A developer with no plan at all (no default) may still ask.
		case err != nil:
			return fmt.Errorf("effective plan: %w", err)
		}
		all, err := LoadAll(ctx, tx)
		if err != nil {
			return err
		}
		offered := false
		for _, p := range UpgradeChoices(all, currentID) {
			offered = offered || p.ID == planID
		}
		if !offered {
			return &ValidationError{Fields: []FieldError{{Field: "plan_id",
				Message: "is not a plan you can ask for: choose a public plan other than yours"}}}
		}
		var id int64
		if err := tx.QueryRow(ctx, insertUpgrade, userID, planID, currentName).Scan(&id); err != nil {
			var pgErr *pgconn.PgError
			switch {
			case errors.As(err, &pgErr) && pgErr.ConstraintName == "plan_upgrade_requests_one_pending":
				return ErrUpgradePending
			case errors.As(err, &pgErr) && pgErr.Code == "23503":
				return fmt.Errorf("developer %d: %w", userID, ErrNotFound)
			}
			return fmt.Errorf("insert upgrade request: %w", err)
		}
		rs, err := queryUpgrades(ctx, tx, "WHERE r.id = $1", id)
		if err != nil {
			return err
		}
		req = rs[0]
		return audit.Record(ctx, tx, "user:"+strconv.FormatInt(userID, 10), "upgrade.request", audit.ObjectUser,
			strconv.FormatInt(userID, 10), nil, req)
	})
	if err != nil {
		var ve *ValidationError
		if errors.As(err, &ve) {
			return UpgradeRequest{}, ve
		}
		return UpgradeRequest{}, fmt.Errorf("request upgrade: %w", err)
	}
	return req, nil
}

// UpgradeRequests returns requests, newest first: those with status
// (pending, approved, refused), or all for "", at most limit.
func (s *Service) UpgradeRequests(ctx context.Context, status string, limit int) ([]UpgradeRequest, error) {
	return queryUpgrades(ctx, s.pool, "WHERE ($1 = '' OR r.status = $1) ORDER BY r.created_at DESC, r.id DESC LIMIT $2", status, limit)
}

// UpgradeRequestsOf returns the developer's requests, newest first.
func (s *Service) UpgradeRequestsOf(ctx context.Context, userID int64, limit int) ([]UpgradeRequest, error) {
	return queryUpgrades(ctx, s.pool, "WHERE r.user_id = $1 ORDER BY r.created_at DESC, r.id DESC LIMIT $2", userID, limit)
}

const (
	lockUpgrade   = `SELECT status, user_id, plan_id FROM plan_upgrade_requests WHERE id = $1 FOR UPDATE`
	decideUpgrade = `
UPDATE plan_upgrade_requests SET status = $2, note = $3, decided_at = now(), decided_by = $4 WHERE id = $1`
	// Approval moves the developer (the users table's NOTIFY rebuilds every
	// instance's snapshot, so the new plan is enforced within a second).
	moveDeveloper = `
UPDATE users SET plan_id = $2, version = version + 1, updated_at = now() WHERE id = $1 AND role = 'developer'`
)

// DecideUpgrade approves or refuses a pending request, with an optional note
// the developer sees; audited as upgrade.approve or upgrade.refuse. Approval
// moves the developer to the plan in the same transaction, so the snapshot
// enforces it at once. A plan archived since the request cannot be approved.
// Errors: *ValidationError (fields "note", "status", "plan_id"), ErrNotFound.
func (s *Service) DecideUpgrade(ctx context.Context, actor string, id int64, approve bool, note string) (UpgradeRequest, error) {
	note = strings.TrimSpace(note)
	if msg := pgtext.Problem(note); msg != "" {
		return UpgradeRequest{}, &ValidationError{Fields: []FieldError{{Field: "note", Message: msg}}}
	}
	if utf8.RuneCountInString(note) > MaxUpgradeNoteLen {
		return UpgradeRequest{}, &ValidationError{Fields: []FieldError{{Field: "note",
			Message: fmt.Sprintf("must be at most %d characters", MaxUpgradeNoteLen)}}}
	}
	var after UpgradeRequest
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var status string
		var userID, planID int64
		err := tx.QueryRow(ctx, lockUpgrade, id).Scan(&status, &userID, &planID)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("upgrade request %d: %w", id, ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("lock upgrade request: %w", err)
		}
		if status != UpgradePending {
			return &ValidationError{Fields: []FieldError{{Field: "status", Message: "this request was already " + status}}}
		}
		before, err := queryUpgrades(ctx, tx, "WHERE r.id = $1", id)
		if err != nil {
			return err
		}
		decision, action := UpgradeRefused, "upgrade.refuse"
		if approve {
			decision, action = UpgradeApproved, "upgrade.approve"
			p, err := getPlan(ctx, tx, "WHERE id = $1", planID)
			if err != nil {
				return err
			}
			if !p.Offered() {
				return &ValidationError{Fields: []FieldError{{Field: "plan_id",
					Message: p.Name + " was archived since the request: restore it, or refuse the request"}}}
			}
			if _, err := tx.Exec(ctx, moveDeveloper, userID, planID); err != nil {
				return fmt.Errorf("move developer: %w", err)
			}
		}
		if _, err := tx.Exec(ctx, decideUpgrade, id, decision, note, actor); err != nil {
			return fmt.Errorf("decide upgrade request: %w", err)
		}
		rs, err := queryUpgrades(ctx, tx, "WHERE r.id = $1", id)
		if err != nil {
			return err
		}
		after = rs[0]
		return audit.Record(ctx, tx, actor, action, audit.ObjectUser, strconv.FormatInt(userID, 10), before[0], after)
	})
	if err != nil {
		var ve *ValidationError
		if errors.As(err, &ve) {
			return UpgradeRequest{}, ve
		}
		return UpgradeRequest{}, fmt.Errorf("decide upgrade request %d: %w", id, err)
	}
	return after, nil
}
