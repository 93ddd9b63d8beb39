package web

import (
	"errors"
	"net/http"

	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/views"
)

// tierDelete removes a tier, provided the plan has not changed since the
// page was rendered. With htmx the row disappears.
func (s *Server) tierDelete(w http.ResponseWriter, r *http.Request) {
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
	saved, err := s.deps.Plans.DeleteLimit(ctx, s.actor(r), p.ID, formVersion(r), l.ID)
	switch {
	case err == nil && isHTMX(r):
		s.render(w, r, http.StatusOK, views.TierRemoved(saved, s.planDocs(saved)))
	case err == nil:
		http.Redirect(w, r, planPath(p.ID)+"?saved=1", http.StatusSeeOther)
	case errors.Is(err, plans.ErrConflict):
		v, loadErr := s.planPage(ctx, p.ID)
		if loadErr != nil {
			s.error(w, r, loadErr)
			return
		}
		if isHTMX(r) {
			current, ok := findLimit(v.Plan, l.ID)
			if !ok {
				s.render(w, r, http.StatusConflict, views.TierRemoved(v.Plan, v.Docs))
				return
			}
			s.render(w, r, http.StatusConflict, views.TierConflictRow(v.Plan, current, conflictMessage, v.Docs, v.Instances))
			return
		}
		v.Conflict = conflictMessage
		s.renderPlanPage(w, r, http.StatusConflict, v)
	default:
		s.error(w, r, err)
	}
}
