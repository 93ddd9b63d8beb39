package adminapi

import (
	"context"
	"net/http"
	"strconv"

	"github.com/sluicehq/sluice/internal/plans"
)

// limitBody is a limit tier as clients send it. Cost 0 means 1 and mode ""
// means reject, as in plans.LimitInput.
type limitBody struct {
	Name          string `json:"name"`
	Route         string `json:"route"`
	Algorithm     string `json:"algorithm"`
	Mode          string `json:"mode"`
	Limit         int64  `json:"limit"`
	WindowSeconds int64  `json:"window_seconds"`
	Burst         int64  `json:"burst"`
	Cost          int64  `json:"cost"`
	// Period is a quota's: day, month or year.
	Period string `json:"period"`
	// CountPer is whose state the tier counts: key or developer ("" for
	// the usual rule).
	CountPer string `json:"count_per"`
	// Precision is exact, leased or local ("" for exact).
	Precision string `json:"precision"`
	// CountWhen is always, success or error ("" for always); CostHeader a
	// response header carrying the cost ("" for none).
	CountWhen  string `json:"count_when"`
	CostHeader string `json:"cost_header"`
}

func (b limitBody) input() plans.LimitInput {
	return plans.LimitInput{
		Name: b.Name, Route: b.Route, Algorithm: b.Algorithm, Mode: b.Mode,
		Limit: b.Limit, WindowSeconds: b.WindowSeconds, Burst: b.Burst, Cost: b.Cost, Period: b.Period,
		CountPer: b.CountPer, Precision: b.Precision, CountWhen: b.CountWhen, CostHeader: b.CostHeader,
	}
}

func limitInputs(bs []limitBody) []plans.LimitInput {
	out := make([]plans.LimitInput, len(bs))
	for i, b := range bs {
		out[i] = b.input()
	}
	return out
}

// planBody is a plan as clients send it to create or replace one.
type planBody struct {
	Slug        string `json:"slug"`
	Name        string `json:"name"`
	Description string `json:"description"`
	IsDefault   bool   `json:"is_default"`
	IsAnonymous bool   `json:"is_anonymous"`
	// IsPublic defaults to true: most plans are meant to be shown.
	IsPublic *bool       `json:"is_public"`
	Limits   []limitBody `json:"limits"`
}

func (b planBody) input() plans.PlanInput {
	public := true
	if b.IsPublic != nil {
		public = *b.IsPublic
	}
	return plans.PlanInput{
		Slug: b.Slug, Name: b.Name, Description: b.Description,
		IsDefault: b.IsDefault, IsAnonymous: b.IsAnonymous, IsPublic: public,
		Limits: limitInputs(b.Limits),
	}
}

// planUpdateBody replaces a plan; Version is the version the client read.
type planUpdateBody struct {
	Version int `json:"version"`
	planBody
}

// planView is a plan as the API returns it, with how many keys and
// developers are assigned to it (a plan with any cannot be deleted).
type planView struct {
	plans.Plan
	Assigned plans.PlanCounts `json:"assigned"`
}

type planList struct {
	Items []planView `json:"items"`
}

func (a *api) listPlans(w http.ResponseWriter, r *http.Request) {
	ps, err := a.plans.List(r.Context())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	counts, err := a.plans.Counts(r.Context())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	out := planList{Items: make([]planView, len(ps))}
	for i, p := range ps {
		out.Items[i] = planView{Plan: p, Assigned: counts[p.ID]}
	}
	writeJSON(w, http.StatusOK, out)
}

// respondPlan answers with p and its assignment counts.
func (a *api) respondPlan(w http.ResponseWriter, r *http.Request, status int, p plans.Plan) {
	counts, err := a.plans.Counts(r.Context())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if status == http.StatusCreated {
		w.Header().Set("Location", Prefix+"/plans/"+strconv.FormatInt(p.ID, 10))
	}
	writeJSON(w, status, planView{Plan: p, Assigned: counts[p.ID]})
}

func (a *api) getPlan(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "id")
	if err != nil {
		a.fail(w, r, err)
		return
	}
	p, err := a.plans.Get(r.Context(), id)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.respondPlan(w, r, http.StatusOK, p)
}

func (a *api) createPlan(w http.ResponseWriter, r *http.Request) {
	var body planBody
	if err := decodeJSON(w, r, &body); err != nil {
		a.fail(w, r, err)
		return
	}
	p, err := a.plans.Create(r.Context(), actor(r), body.input())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.respondPlan(w, r, http.StatusCreated, p)
}

func (a *api) updatePlan(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "id")
	if err != nil {
		a.fail(w, r, err)
		return
	}
	var body planUpdateBody
	if err := decodeJSON(w, r, &body); err != nil {
		a.fail(w, r, err)
		return
	}
	if err := requireVersion(body.Version); err != nil {
		a.fail(w, r, err)
		return
	}
	p, err := a.plans.Update(r.Context(), actor(r), id, body.Version, body.input())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.respondPlan(w, r, http.StatusOK, p)
}

func (a *api) deletePlan(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "id")
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if err := a.plans.Delete(r.Context(), actor(r), id); err != nil {
		a.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// limitWriteBody adds or replaces one tier; Version is the plan's version
// the client read, since every tier edit changes the plan's version.
type limitWriteBody struct {
	Version int `json:"version"`
	limitBody
}

func (a *api) addLimit(w http.ResponseWriter, r *http.Request) {
	planID, err := pathID(r, "id")
	if err != nil {
		a.fail(w, r, err)
		return
	}
	var body limitWriteBody
	if err := decodeJSON(w, r, &body); err != nil {
		a.fail(w, r, err)
		return
	}
	if err := requireVersion(body.Version); err != nil {
		a.fail(w, r, err)
		return
	}
	p, err := a.plans.AddLimit(r.Context(), actor(r), planID, body.Version, body.input())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.respondPlan(w, r, http.StatusCreated, p)
}

func (a *api) updateLimit(w http.ResponseWriter, r *http.Request) {
	planID, err := pathID(r, "id")
	if err != nil {
		a.fail(w, r, err)
		return
	}
	limitID, err := pathID(r, "limit_id")
	if err != nil {
		a.fail(w, r, err)
		return
	}
	var body limitWriteBody
	if err := decodeJSON(w, r, &body); err != nil {
		a.fail(w, r, err)
		return
	}
	if err := requireVersion(body.Version); err != nil {
		a.fail(w, r, err)
		return
	}
	p, err := a.plans.UpdateLimit(r.Context(), actor(r), planID, body.Version, limitID, body.input())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.respondPlan(w, r, http.StatusOK, p)
}

// promoteLimit turns a shadow tier into an enforced one.
func (a *api) promoteLimit(w http.ResponseWriter, r *http.Request) {
	a.changeLimit(w, r, a.plans.PromoteLimit)
}

// deleteLimit removes one tier.
func (a *api) deleteLimit(w http.ResponseWriter, r *http.Request) {
	a.changeLimit(w, r, a.plans.DeleteLimit)
}

// changeLimit runs change on the tier {limit_id} of plan {id} and answers
// with the plan as it now is. The plan version comes as ?version=, since
// these requests (a DELETE, a bodiless POST) carry no body.
func (a *api) changeLimit(w http.ResponseWriter, r *http.Request,
	change func(ctx context.Context, actor string, planID int64, version int, limitID int64) (plans.Plan, error)) {
	planID, err := pathID(r, "id")
	if err != nil {
		a.fail(w, r, err)
		return
	}
	limitID, err := pathID(r, "limit_id")
	if err != nil {
		a.fail(w, r, err)
		return
	}
	qr := newQueryReader(r)
	version := qr.int64Range("version", 0, 1, 1<<31-1)
	if err := qr.err(); err != nil {
		a.fail(w, r, err)
		return
	}
	if err := requireVersion(int(version)); err != nil {
		a.fail(w, r, err)
		return
	}
	p, err := change(r.Context(), actor(r), planID, int(version), limitID)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.respondPlan(w, r, http.StatusOK, p)
}
