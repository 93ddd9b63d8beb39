package web

import (
	"errors"
	"net/http"

	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/views"
)

func findLimit(p plans.Plan, id int64) (plans.Limit, bool) {
	for _, l := range p.Limits {
		if l.ID == id {
			return l, true
		}
	}
	return plans.Limit{}, false
}

// tierLoad reads the plan and tier named by the path.
func (s *Server) tierLoad(r *http.Request) (plans.Plan, plans.Limit, error) {
	planID, err := pathID(r, "id")
	if err != nil {
		return plans.Plan{}, plans.Limit{}, err
	}
	limitID, err := pathID(r, "limitID")
	if err != nil {
		return plans.Plan{}, plans.Limit{}, err
	}
	p, err := s.deps.Plans.Get(r.Context(), planID)
	if err != nil {
		return plans.Plan{}, plans.Limit{}, err
	}
	l, ok := findLimit(p, limitID)
	if !ok {
		return plans.Plan{}, plans.Limit{}, errNotFound
	}
	return p, l, nil
}

// tierShow answers htmx's "cancel" with the read-only row; a browser without
// JavaScript gets the plan page.
func (s *Server) tierShow(w http.ResponseWriter, r *http.Request) {
	p, l, err := s.tierLoad(r)
	if err != nil {
		s.error(w, r, err)
		return
	}
	if !isHTMX(r) {
		http.Redirect(w, r, planPath(p.ID), http.StatusSeeOther)
		return
	}
	s.render(w, r, http.StatusOK, views.TierSaved(p, l, s.planDocs(p), s.deps.Instances))
}

// tierEditForm shows a tier as a form: the row alone for htmx, the plan page
// with that row as a form otherwise.
func (s *Server) tierEditForm(w http.ResponseWriter, r *http.Request) {
	p, l, err := s.tierLoad(r)
	if err != nil {
		s.error(w, r, err)
		return
	}
	f := views.TierForm{LimitID: l.ID, Input: l.Input()}
	if isHTMX(r) {
		s.render(w, r, http.StatusOK, views.TierEditFragment(p, s.tierRoutes(r.Context()), f, s.planDocs(p), s.deps.Instances))
		return
	}
	v, err := s.planPage(r.Context(), p.ID)
	if err != nil {
		s.error(w, r, err)
		return
	}
	v.Editing = &f
	s.renderPlanPage(w, r, http.StatusOK, v)
}

// tierUpdate saves an edited tier, provided the plan has not changed since
// the form was rendered.
func (s *Server) tierUpdate(w http.ResponseWriter, r *http.Request) {
	p, l, err := s.tierLoad(r)
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
	f := views.TierForm{LimitID: l.ID, Input: in, Errors: parseErrs, Typed: typed}
	if len(parseErrs) == 0 {
		saved, err := s.deps.Plans.UpdateLimit(ctx, s.actor(r), p.ID, formVersion(r), l.ID, in)
		if err == nil {
			if !isHTMX(r) {
				http.Redirect(w, r, planPath(p.ID)+"?saved=1", http.StatusSeeOther)
				return
			}
			if nl, ok := findLimit(saved, l.ID); ok {
				s.render(w, r, http.StatusOK, views.TierSaved(saved, nl, s.planDocs(saved), s.deps.Instances))
				return
			}
			s.error(w, r, errNotFound)
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
	status := http.StatusUnprocessableEntity
	if f.Conflict != "" {
		status = http.StatusConflict
	}
	// Re-read the plan so a conflict shows the version that won.
	v, err := s.planPage(ctx, p.ID)
	if err != nil {
		s.error(w, r, err)
		return
	}
	if isHTMX(r) {
		s.render(w, r, status, views.TierEditFragment(v.Plan, v.Routes, f, v.Docs, v.Instances))
		return
	}
	v.Editing = &f
	if f.Conflict != "" {
		v.Conflict = f.Conflict
	}
	s.renderPlanPage(w, r, status, v)
}
