// Package quotas holds an operator's changes to a developer's quota for the
// current period: a grant of extra units, or a reset of the period's count.
// The admin API and the dashboard both go through Adjust, so both validate
// alike and audit in the same transaction.
package quotas

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/audit"
	"github.com/sluicehq/sluice/internal/billing"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/users"
)

// MaxGrant bounds a top-up, like a tier's limit.
const MaxGrant = 1_000_000_000_000

// ErrUnavailable means the portal's store cannot change quotas (no Adjuster
// was wired).
var ErrUnavailable = errors.New("quota changes unavailable: the rate-limit store cannot change quotas")

// Adjuster is the part of the engine's stores that changes a quota's count
// outside a decision: the quota ledger (which records the change so a
// counter rebuilt after a loss keeps it), or a memory store.
type Adjuster interface {
	GrantQuota(ctx context.Context, req enforce.Request, units int64) (enforce.LayerResult, error)
	ResetQuota(ctx context.Context, req enforce.Request) (enforce.LayerResult, error)
}

// Change is one operator action on one quota tier of a developer's plan.
type Change struct {
	// Limit names the quota tier.
	Limit string
	// Grant is true for a top-up of Units (1..MaxGrant), which lasts until
	// the period renews; false resets the period's count to zero.
	Grant bool
	Units int64
}

// Result is the quota as it stands after a change.
type Result struct {
	Plan  plans.Plan
	Limit plans.Limit
	After enforce.LayerResult
}

// Service applies changes; every field is required except Store (nil:
// every change fails with ErrUnavailable).
type Service struct {
	Pool  *pgxpool.Pool
	Users *users.Repo
	Plans *plans.Service
	Store Adjuster
}

// Adjust validates c against developer userID's plan and applies it, audited
// as quota.grant or quota.reset by actor in the transaction the change
// commits with. Errors: *plans.ValidationError naming the field ("limit",
// "units"), users.ErrNotFound (no developer of this id), ErrUnavailable,
// enforce.ErrStoreUnavailable (nothing changed).
func (s Service) Adjust(ctx context.Context, actor string, userID int64, c Change) (Result, error) {
	var fields []plans.FieldError
	if c.Limit == "" {
		fields = append(fields, plans.FieldError{Field: "limit", Message: "is required: the name of a quota tier of the developer's plan"})
	}
	if c.Grant && (c.Units < 1 || c.Units > MaxGrant) {
		fields = append(fields, plans.FieldError{Field: "units", Message: "must be a whole number from 1 to " + strconv.FormatInt(MaxGrant, 10)})
	}
	if len(fields) > 0 {
		return Result{}, &plans.ValidationError{Fields: fields}
	}
	if s.Store == nil {
		return Result{}, ErrUnavailable
	}
	u, err := s.Users.ByID(ctx, userID)
	if err == nil && u.Role != users.RoleDeveloper {
		err = users.ErrNotFound
	}
	if err != nil {
		return Result{}, err
	}
	plan, err := s.DeveloperPlan(ctx, u)
	if err != nil {
		return Result{}, err
	}
	var limit *plans.Limit
	for i := range plan.Limits {
		if l := &plan.Limits[i]; l.Name == c.Limit && l.Algorithm == enforce.Quota {
			limit = l
		}
	}
	if limit == nil {
		return Result{}, &plans.ValidationError{Fields: []plans.FieldError{{Field: "limit", Message: "the developer's plan " + plan.Slug + " has no quota tier of this name"}}}
	}
	if limit.CountPer == plans.CountPerKey {
		// Each key counts its own; the account's count that a change here
		// would touch is one no request spends from.
		return Result{}, &plans.ValidationError{Fields: []plans.FieldError{{Field: "limit", Message: "is counted per API key: there is no account-wide count to grant to or reset"}}}
	}
	anchor, err := billing.Get(ctx, s.Pool, userID)
	if err != nil {
		return Result{}, err
	}
	req := enforce.Request{Subject: enforce.DeveloperSubject(userID), Limits: []enforce.Limit{limit.Enforce(plan.Slug)}, Anchor: anchor.Effective}
	action, units := "quota.reset", int64(0)
	if c.Grant {
		action, units = "quota.grant", c.Units
	}
	var got enforce.LayerResult
	err = pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		entry := struct {
			Plan  string `json:"plan"`
			Limit string `json:"limit"`
			Units int64  `json:"units,omitempty"`
		}{plan.Slug, limit.Name, units}
		if err := audit.Record(ctx, tx, actor, action, audit.ObjectUser, strconv.FormatInt(userID, 10), nil, entry); err != nil {
			return err
		}
		// Last, so a failed change leaves no audit entry behind.
		var err error
		if c.Grant {
			got, err = s.Store.GrantQuota(ctx, req, units)
		} else {
			got, err = s.Store.ResetQuota(ctx, req)
		}
		return err
	})
	if err != nil {
		return Result{}, fmt.Errorf("%s of %s for user %d: %w", action, limit.Name, userID, err)
	}
	return Result{Plan: plan, Limit: *limit, After: got}, nil
}

// DeveloperPlan is the plan a developer's keys fall back to: theirs, else
// the default plan. Without either it is a *plans.ValidationError on
// "limit": there is no quota tier to change.
func (s Service) DeveloperPlan(ctx context.Context, u users.User) (plans.Plan, error) {
	if u.PlanID != nil {
		return s.Plans.Get(ctx, *u.PlanID)
	}
	all, err := s.Plans.List(ctx)
	if err != nil {
		return plans.Plan{}, err
	}
	for _, p := range all {
		if p.IsDefault {
			return p, nil
		}
	}
	return plans.Plan{}, &plans.ValidationError{Fields: []plans.FieldError{{Field: "limit", Message: "the developer has no plan and no plan is the default"}}}
}

// selectGranted sums the grants of one quota since the later of the period's
// start and the quota's last reset (a reset drops the period's grants with
// its count). The audit log is the record: every grant and reset is written
// there in the transaction that makes it.
const selectGranted = `
SELECT COALESCE(sum((after->>'units')::bigint), 0)::bigint FROM audit_log
WHERE object_type = 'user' AND object_id = $1 AND action = 'quota.grant'
  AND after->>'plan' = $2 AND after->>'limit' = $3
  AND at >= GREATEST($4, (SELECT max(at) FROM audit_log
    WHERE object_type = 'user' AND object_id = $1 AND action = 'quota.reset'
      AND after->>'plan' = $2 AND after->>'limit' = $3 AND at >= $4))`

// Granted is how many units operators granted developer userID of the
// quota limit of plan (a slug) this period, which began at since: what
// the remaining holds beyond the limit less what was used.
func Granted(ctx context.Context, db audit.DBTX, userID int64, plan, limit string, since time.Time) (int64, error) {
	var n int64
	if err := db.QueryRow(ctx, selectGranted, strconv.FormatInt(userID, 10), plan, limit, since).Scan(&n); err != nil {
		return 0, fmt.Errorf("granted %s of user %d: %w", limit, userID, err)
	}
	return n, nil
}
