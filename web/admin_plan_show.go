package web

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/sluicehq/sluice/internal/docs"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/views"
)

// conflictMessage is shown when an edit names a version someone else has
// already replaced.
const conflictMessage = "Someone else saved this plan after you opened it, so your change was not saved. " +
	"The plan as it is now is shown; apply your change again if it is still needed."

func planPath(id int64) string { return "/admin/plans/" + strconv.FormatInt(id, 10) }

// tierRoutes lists the routes a tier may name for the forms: the portal's
// own and every service's. If Postgres cannot list the services' routes,
// the forms still offer the portal's (the save itself then reports the
// outage).
func (s *Server) tierRoutes(ctx context.Context) []string {
	routes, err := s.deps.Plans.RoutesContext(ctx)
	if err != nil {
		s.log.WarnContext(ctx, "listing declared routes", "err", err)
		return s.deps.Plans.Routes()
	}
	return routes
}

// planPage loads what the plan page shows.
func (s *Server) planPage(ctx context.Context, id int64) (views.PlanPage, error) {
	p, err := s.deps.Plans.Get(ctx, id)
	if err != nil {
		return views.PlanPage{}, err
	}
	counts, err := s.deps.Plans.Counts(ctx)
	if err != nil {
		return views.PlanPage{}, err
	}
	v := views.PlanPage{
		Plan:    p,
		Routes:  s.tierRoutes(ctx),
		Counts:  counts[p.ID],
		Details: views.PlanForm{Input: p.Input()},
		Docs:    s.planDocs(p),
		// Each tier's row states its worst case with this many.
		Instances: s.deps.Instances,
	}
	// Who the shadow tiers would have rejected, beside the tiers.
	v.Shadow, v.ShadowProblem = s.shadowCallers(ctx, p.Slug)
	v.ShadowShown = len(v.Shadow) > 0 || hasShadowTier(p)
	return v, nil
}

// planDocs is what the docs generator makes of one plan, for the preview;
// nil (and a log line) if it fails, which the preview says plainly.
func (s *Server) planDocs(p plans.Plan) *docs.Model {
	m, err := docs.Build([]plans.Plan{p}, docs.Options{YourPlan: p.Slug, Now: docsNow(s.now()), Instances: s.deps.Instances})
	if err != nil {
		s.log.Error("docs preview", "plan_id", p.ID, "err", err)
		return nil
	}
	return &m
}

func (s *Server) renderPlanPage(w http.ResponseWriter, r *http.Request, status int, v views.PlanPage) {
	s.render(w, r, status, views.PlanDetailPage(s.page(r, v.Plan.Name, "plans"), v))
}

func (s *Server) planShow(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "id")
	if err != nil {
		s.error(w, r, err)
		return
	}
	v, err := s.planPage(r.Context(), id)
	if err != nil {
		s.error(w, r, err)
		return
	}
	if r.URL.Query().Get("saved") != "" {
		v.Saved = "Saved."
	}
	s.renderPlanPage(w, r, http.StatusOK, v)
}

// planUpdate saves the plan's own fields, keeping its tiers as they were
// when the form was rendered (the version check guarantees that).
func (s *Server) planUpdate(w http.ResponseWriter, r *http.Request) {
	id, ok := s.postedID(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	current, err := s.deps.Plans.Get(ctx, id)
	if err != nil {
		s.error(w, r, err)
		return
	}
	in := planInput(r)
	in.Limits = current.Input().Limits
	_, err = s.deps.Plans.Update(ctx, s.actor(r), id, formVersion(r), in)
	if err == nil {
		http.Redirect(w, r, planPath(id)+"?saved=1", http.StatusSeeOther)
		return
	}
	v, loadErr := s.planPage(ctx, id)
	if loadErr != nil {
		s.error(w, r, loadErr)
		return
	}
	switch errs, invalid := fieldErrors(err); {
	case invalid:
		v.Details = views.PlanForm{Input: in, Errors: errs}
		s.renderPlanPage(w, r, http.StatusUnprocessableEntity, v)
	case errors.Is(err, plans.ErrConflict):
		v.Conflict = conflictMessage
		s.renderPlanPage(w, r, http.StatusConflict, v)
	case errors.Is(err, plans.ErrSlugTaken):
		v.Details = views.PlanForm{Input: in, Errors: views.FieldErrors{"slug": "is already used by another plan"}}
		s.renderPlanPage(w, r, http.StatusConflict, v)
	default:
		s.error(w, r, err)
	}
}
