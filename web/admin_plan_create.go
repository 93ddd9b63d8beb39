package web

import (
	"errors"
	"net/http"

	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/views"
)

func (s *Server) planNew(w http.ResponseWriter, r *http.Request) {
	f := views.PlanForm{Input: plans.PlanInput{IsPublic: true}}
	s.render(w, r, http.StatusOK, views.PlanNewPage(s.page(r, "New plan", "plans"), f))
}

// planCreate creates a plan without tiers; tiers are added on its page.
func (s *Server) planCreate(w http.ResponseWriter, r *http.Request) {
	if err := parseForm(w, r); err != nil {
		s.error(w, r, err)
		return
	}
	in := planInput(r)
	p, err := s.deps.Plans.Create(r.Context(), s.actor(r), in)
	if errs, ok := fieldErrors(err); ok {
		s.render(w, r, http.StatusUnprocessableEntity, views.PlanNewPage(s.page(r, "New plan", "plans"), views.PlanForm{Input: in, Errors: errs}))
		return
	}
	if errors.Is(err, plans.ErrSlugTaken) {
		errs := views.FieldErrors{"slug": "is already used by another plan"}
		s.render(w, r, http.StatusConflict, views.PlanNewPage(s.page(r, "New plan", "plans"), views.PlanForm{Input: in, Errors: errs}))
		return
	}
	if err != nil {
		s.error(w, r, err)
		return
	}
	http.Redirect(w, r, planPath(p.ID), http.StatusSeeOther)
}
