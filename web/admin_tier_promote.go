package web

import (
	"errors"
	"net/http"

	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/views"
)

// tierPromote turns a shadow tier into an enforced one (mode reject) in one
// audited action, provided the plan has not changed since the page was
// rendered. It is a plain form post in two steps: the plan page's Enforce
// asks (a page saying what enforcing does), and only the confirmation,
// which carries confirm=enforce, promotes; the page then reloads with the
// tier enforced.
func (s *Server) tierPromote(w http.ResponseWriter, r *http.Request) {
	p, l, err := s.tierLoad(r)
	if err != nil {
		s.error(w, r, err)
		return
	}
	if err := parseForm(w, r); err != nil {
		s.error(w, r, err)
		return
	}
	if r.PostFormValue("confirm") != "enforce" {
		// The confirmation carries the version the operator's page
		// showed, so a change made meanwhile is still a conflict.
		s.render(w, r, http.StatusOK, views.TierPromoteConfirm(s.page(r, "Enforce "+l.Name, "plans"), p, l, formVersion(r)))
		return
	}
	ctx := r.Context()
	_, err = s.deps.Plans.PromoteLimit(ctx, s.actor(r), p.ID, formVersion(r), l.ID)
	var ve *plans.ValidationError
	switch {
	case err == nil:
		http.Redirect(w, r, planPath(p.ID)+"?saved=1", http.StatusSeeOther)
	case errors.Is(err, plans.ErrConflict), errors.As(err, &ve):
		v, loadErr := s.planPage(ctx, p.ID)
		if loadErr != nil {
			s.error(w, r, loadErr)
			return
		}
		v.Conflict = conflictMessage
		status := http.StatusConflict
		if ve != nil {
			v.Conflict, status = ve.Fields[0].Message, http.StatusUnprocessableEntity
		}
		s.renderPlanPage(w, r, status, v)
	default:
		s.error(w, r, err)
	}
}
