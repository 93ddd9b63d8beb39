package adminapi

import (
	"errors"
	"net/http"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/quotas"
)

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

func (a *api) grantQuota(w http.ResponseWriter, r *http.Request) { a.adjustQuota(w, r, true) }
func (a *api) resetQuota(w http.ResponseWriter, r *http.Request) { a.adjustQuota(w, r, false) }

// adjustQuota grants units of, or resets, a developer's quota for the
// current period through quotas.Service.Adjust, the dashboard's path too.
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
	svc := quotas.Service{Pool: a.pool, Users: a.users, Plans: a.plans}
	if adj, ok := a.store.(quotas.Adjuster); ok {
		svc.Store = adj
	}
	got, err := svc.Adjust(r.Context(), actor(r), id, quotas.Change{Limit: body.Limit, Grant: grant, Units: body.Units})
	switch {
	case errors.Is(err, quotas.ErrUnavailable):
		writeProblem(w, r, Problem{Type: typeConflict, Title: "Quota changes unavailable", Status: http.StatusServiceUnavailable,
			Detail: "The rate-limit store in use cannot change quotas."})
	case errors.Is(err, enforce.ErrStoreUnavailable):
		writeProblem(w, r, Problem{Type: typeConflict, Title: "Rate-limit store unavailable", Status: http.StatusServiceUnavailable,
			Detail: "The counters cannot be reached right now; nothing was changed."})
	case err != nil:
		a.fail(w, r, err)
	default:
		writeJSON(w, http.StatusOK, quotaResult{Plan: got.Plan.Slug, Limit: got.Limit.Name, Remaining: got.After.Remaining,
			ResetAfterSeconds: int64((got.After.ResetAfter + 999_999_999) / 1_000_000_000)})
	}
}
