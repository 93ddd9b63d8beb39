package web

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/sluicehq/sluice/internal/audit"
	"github.com/sluicehq/sluice/internal/users"
	"github.com/sluicehq/sluice/views"
)

// adminOrgs lists every organisation for the operators.
func (s *Server) adminOrgs(w http.ResponseWriter, r *http.Request) {
	list, err := s.orgs.List(r.Context())
	if err != nil {
		s.error(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, views.AdminOrgsPage(s.page(r, "Organisations", "orgs"), list))
}

func (s *Server) adminOrgView(r *http.Request, id int64) (views.AdminOrgView, error) {
	ctx := r.Context()
	var v views.AdminOrgView
	var err error
	if v.Org, err = s.orgs.Summary(ctx, id); err != nil {
		return v, err
	}
	if v.Members, err = s.orgs.Members(ctx, id); err != nil {
		return v, err
	}
	if v.Plans, err = s.deps.Plans.List(ctx); err != nil {
		return v, err
	}
	account, err := s.deps.Users.ByID(ctx, v.Org.AccountUserID)
	if err != nil {
		return v, err
	}
	v.Version = account.Version
	return v, nil
}

// adminOrg shows one organisation: members and plan.
func (s *Server) adminOrg(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "id")
	if err != nil {
		s.error(w, r, err)
		return
	}
	v, err := s.adminOrgView(r, id)
	if err != nil {
		s.error(w, r, err)
		return
	}
	v.Saved = r.URL.Query().Get("saved") == "1"
	s.render(w, r, http.StatusOK, views.AdminOrgPage(s.page(r, "Organisation "+v.Org.Name, "orgs"), v))
}

// adminOrgSetPlan moves an organisation (its account, and every key
// without a plan of its own) to another plan, audited.
func (s *Server) adminOrgSetPlan(w http.ResponseWriter, r *http.Request) {
	id, ok := s.postedID(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	org, err := s.orgs.ByID(ctx, id)
	if err != nil {
		s.error(w, r, err)
		return
	}
	before, err := s.deps.Users.ByID(ctx, org.AccountUserID)
	if err != nil {
		s.error(w, r, err)
		return
	}
	planID, perr := formPlanID(r)
	if perr == nil && planID == nil {
		perr = errors.New("choose a plan from the list")
	}
	if perr == nil {
		if perr = s.offeredPlan(r, planID, before.PlanID); perr != nil && !errors.Is(perr, errArchivedPlan) {
			s.error(w, r, perr)
			return
		}
	}
	version, _ := strconv.Atoi(r.PostFormValue("version"))
	message, status := "", http.StatusUnprocessableEntity
	if perr != nil {
		message = perr.Error()
	} else {
		after, err := s.deps.Users.SetPlan(ctx, before.ID, planID, version)
		switch {
		case err == nil:
			if aerr := audit.Record(ctx, s.deps.Pool, s.actor(r), "organisation.set_plan", audit.ObjectOrg,
				strconv.FormatInt(id, 10), map[string]any{"plan_id": before.PlanID}, map[string]any{"plan_id": after.PlanID}); aerr != nil {
				s.log.Error("audit organisation plan change", "org_id", id, "err", aerr)
			}
			http.Redirect(w, r, "/admin/orgs/"+strconv.FormatInt(id, 10)+"?saved=1", http.StatusSeeOther)
			return
		case errors.Is(err, users.ErrUnknownPlan):
			message = "That plan no longer exists."
		case errors.Is(err, users.ErrConflict):
			message = "Someone else changed this organisation's plan first; the current plan is shown. Try again."
			status = http.StatusConflict
		default:
			s.error(w, r, err)
			return
		}
	}
	v, err := s.adminOrgView(r, id)
	if err != nil {
		s.error(w, r, err)
		return
	}
	v.Error = message
	s.render(w, r, status, views.AdminOrgPage(s.page(r, "Organisation "+v.Org.Name, "orgs"), v))
}
