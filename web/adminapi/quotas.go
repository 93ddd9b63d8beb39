package adminapi

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/internal/audit"
	"github.com/sluicehq/sluice/internal/billing"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/users"
)

// quotaAdjuster is the part of the engine's stores that changes a quota's
// count outside a decision (MemoryStore and RedisStore have it).
type quotaAdjuster interface {
	GrantQuota(ctx context.Context, req enforce.Request, units int64) (enforce.LayerResult, error)
	ResetQuota(ctx context.Context, req enforce.Request) (enforce.LayerResult, error)
}

// quotaBody names one quota tier of the developer's plan; Units is a
// grant's top-up (it lasts until the period renews).
type quotaBody struct {
	Limit string `json:"limit"`
	Units int64  `json:"units"`
}

// quotaResult is the quota as it stands after the change.
type quotaResult struct {
	Plan              string `json:"plan"`
	Limit             string `json:"limit"`
	Remaining         int64  `json:"remaining"`
	ResetAfterSeconds int64  `json:"reset_after_seconds"`
}

// maxGrant bounds a top-up, like a tier's limit.
const maxGrant = 1_000_000_000_000

func (a *api) grantQuota(w http.ResponseWriter, r *http.Request) { a.adjustQuota(w, r, true) }
func (a *api) resetQuota(w http.ResponseWriter, r *http.Request) { a.adjustQuota(w, r, false) }

// adjustQuota grants units of, or resets, a developer's quota for the
// current period, audited (quota.grant, quota.reset) in the transaction the
// store's change commits with.
func (a *api) adjustQuota(w http.ResponseWriter, r *http.Request, grant bool) {
	id, err := pathID(r, "id")
	if err != nil {
		a.fail(w, r, err)
		return
	}
	var body quotaBody
	if err := decodeJSON(w, r, &body); err != nil {
		a.fail(w, r, err)
		return
	}
	var fields []FieldError
	if body.Limit == "" {
		fields = append(fields, FieldError{Field: "limit", Message: "is required: the name of a quota tier of the developer's plan"})
	}
	if grant && (body.Units < 1 || body.Units > maxGrant) {
		fields = append(fields, FieldError{Field: "units", Message: "must be from 1 to 1000000000000"})
	}
	if len(fields) > 0 {
		a.fail(w, r, &validationError{fields: fields})
		return
	}
	adj, ok := a.store.(quotaAdjuster)
	if !ok {
		writeProblem(w, r, Problem{Type: typeConflict, Title: "Quota changes unavailable", Status: http.StatusServiceUnavailable,
			Detail: "The rate-limit store in use cannot change quotas."})
		return
	}
	ctx := r.Context()
	u, err := a.users.ByID(ctx, id)
	if err == nil && u.Role != users.RoleDeveloper {
		err = users.ErrNotFound
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	plan, err := a.developerPlan(ctx, u)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	var limit *plans.Limit
	for i := range plan.Limits {
		if l := &plan.Limits[i]; l.Name == body.Limit && l.Algorithm == enforce.Quota {
			limit = l
		}
	}
	if limit == nil {
		a.fail(w, r, &validationError{fields: []FieldError{{Field: "limit", Message: "the developer's plan " + plan.Slug + " has no quota tier of this name"}}})
		return
	}
	anchor, err := billing.Get(ctx, a.pool, id)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	req := enforce.Request{Subject: enforce.DeveloperSubject(id), Limits: []enforce.Limit{limit.Enforce(plan.Slug)}, Anchor: anchor.Effective}
	action := "quota.reset"
	if grant {
		action = "quota.grant"
	}
	var got enforce.LayerResult
	err = pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		entry := struct {
			Plan  string `json:"plan"`
			Limit string `json:"limit"`
			Units int64  `json:"units,omitempty"`
		}{plan.Slug, limit.Name, body.Units}
		if err := audit.Record(ctx, tx, actor(r), action, audit.ObjectUser, strconv.FormatInt(id, 10), nil, entry); err != nil {
			return err
		}
		// Last, so a failed change leaves no audit entry behind.
		var err error
		if grant {
			got, err = adj.GrantQuota(ctx, req, body.Units)
		} else {
			got, err = adj.ResetQuota(ctx, req)
		}
		return err
	})
	if errors.Is(err, enforce.ErrStoreUnavailable) {
		writeProblem(w, r, Problem{Type: typeConflict, Title: "Rate-limit store unavailable", Status: http.StatusServiceUnavailable,
			Detail: "The counters cannot be reached right now; nothing was changed."})
		return
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, quotaResult{Plan: plan.Slug, Limit: limit.Name, Remaining: got.Remaining,
		ResetAfterSeconds: int64((got.ResetAfter + 999_999_999) / 1_000_000_000)})
}

// developerPlan is the plan a developer's keys fall back to: theirs, else
// the default plan.
func (a *api) developerPlan(ctx context.Context, u users.User) (plans.Plan, error) {
	if u.PlanID != nil {
		return a.plans.Get(ctx, *u.PlanID)
	}
	all, err := a.plans.List(ctx)
	if err != nil {
		return plans.Plan{}, err
	}
	for _, p := range all {
		if p.IsDefault {
			return p, nil
		}
	}
	return plans.Plan{}, &validationError{fields: []FieldError{{Field: "limit", Message: "the developer has no plan and no plan is the default"}}}
}
