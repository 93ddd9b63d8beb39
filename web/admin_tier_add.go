package web

import (
	"errors"
	"net/http"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/views"
)

// tierAdd adds a tier to a plan. With htmx the answer is the new row
// (appended out of band) and a fresh form; without it, the plan page.
func (s *Server) tierAdd(w http.ResponseWriter, r *http.Request) {
	planID, err := pathID(r, "id")
	if err != nil {
		s.error(w, r, err)
		return
	}
	if err := parseForm(w, r); err != nil {
		s.error(w, r, err)
		return
	}
	ctx := r.Context()
	in, parseErrs, typed := tierInput(r)
	f := views.TierForm{Input: in, Errors: parseErrs, Typed: typed}
	var p plans.Plan
	if len(parseErrs) == 0 {
		p, err = s.deps.Plans.AddLimit(ctx, s.actor(r), planID, formVersion(r), in)
		if err == nil {
			s.tierAdded(w, r, p, in.Name)
			return
		}
		errs, invalid := fieldErrors(err)
		switch {
		case invalid:
			f.Errors = errs
		case errors.Is(err, plans.ErrConflict):
			f.Conflict = conflictMessage
		default:
			s.error(w, r, err)
			return
		}
	}
	// A refused shadow tier is not kept as shadow: the form stays open
	// for the next tier, which would otherwise be added in the dark
	// without anyone choosing it. The operator picks shadow again, told so.
	if f.Input.Mode == string(enforce.ModeShadow) {
		f.Input.Mode = ""
		if _, explained := f.Errors["mode"]; !explained {
			f.Errors["mode"] = "set back to reject: choose shadow again to try this tier in the dark"
		}
	}
	status := http.StatusUnprocessableEntity
	if f.Conflict != "" {
		status = http.StatusConflict
	}
	v, err := s.planPage(ctx, planID)
	if err != nil {
		s.error(w, r, err)
		return
	}
	if isHTMX(r) {
		s.render(w, r, status, views.TierAddRejected(v.Plan, v.Routes, f, v.Docs, v.Instances))
		return
	}
	v.New = f
	s.renderPlanPage(w, r, status, v)
}

func (s *Server) tierAdded(w http.ResponseWriter, r *http.Request, p plans.Plan, name string) {
	if !isHTMX(r) {
		http.Redirect(w, r, planPath(p.ID)+"?saved=1", http.StatusSeeOther)
		return
	}
	for _, l := range p.Limits {
		if l.Name == name {
			s.render(w, r, http.StatusOK, views.TierAdded(p, l, s.tierRoutes(r.Context()), s.planDocs(p), s.deps.Instances))
			return
		}
	}
	// The tier is saved but not found by name (renamed by a racing edit):
	// show the whole table as it is.
	s.render(w, r, http.StatusOK, views.TierAddRejected(p, s.tierRoutes(r.Context()), views.TierForm{}, s.planDocs(p), s.deps.Instances))
}
