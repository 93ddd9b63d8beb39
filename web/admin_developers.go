package web

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/internal/audit"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/users"
	"github.com/sluicehq/sluice/views"
)

// developersPageSize is one page of the developers list; the search
// narrows it and the page links move through it.
const developersPageSize = 50

func (s *Server) developersData(r *http.Request, q string) (views.DevelopersList, error) {
	ctx := r.Context()
	offset, err := strconv.Atoi(r.URL.Query().Get("offset"))
	if err != nil || offset < 0 {
		offset = 0
	}
	// One more than a page says whether another page follows.
	devs, err := s.deps.Users.List(ctx, users.ListFilter{Role: users.RoleDeveloper, EmailContains: q, Limit: developersPageSize + 1, Offset: offset})
	if err != nil {
		return views.DevelopersList{}, err
	}
	more := len(devs) > developersPageSize
	if more {
		devs = devs[:developersPageSize]
	}
	all, err := s.deps.Plans.List(ctx)
	if err != nil {
		return views.DevelopersList{}, err
	}
	ids := make([]int64, len(devs))
	for i, d := range devs {
		ids[i] = d.ID
	}
	disabled, err := s.deps.Users.DisabledSince(ctx, ids)
	if err != nil {
		return views.DevelopersList{}, err
	}
	pending, err := s.deps.Plans.UpgradeRequests(ctx, plans.UpgradePending, maxUpgradesShown)
	if err != nil {
		return views.DevelopersList{}, err
	}
	return views.DevelopersList{Query: q, Developers: devs, Plans: all, Disabled: disabled,
		Offset: offset, PageSize: developersPageSize, More: more, PendingUpgrades: len(pending)}, nil
}

func (s *Server) developersList(w http.ResponseWriter, r *http.Request) {
	l, err := s.developersData(r, strings.TrimSpace(r.URL.Query().Get("q")))
	if err != nil {
		s.error(w, r, err)
		return
	}
	switch r.URL.Query().Get("saved") {
	case "":
	case "disable":
		l.Message = "Developer disabled: every key of theirs is refused from now on, on every instance."
	case "enable":
		l.Message = "Developer enabled: their keys work again."
	default:
		l.Message = "Plan changed."
	}
	s.render(w, r, http.StatusOK, views.DevelopersPage(s.page(r, "Developers", "developers"), l))
}

// developerSetPlan moves a developer (and every key without a plan of its
// own) to another plan, and records it in the audit log.
func (s *Server) developerSetPlan(w http.ResponseWriter, r *http.Request) {
	id, ok := s.postedID(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	before, err := s.deps.Users.ByID(ctx, id)
	if err != nil {
		s.error(w, r, err)
		return
	}
	if before.Role != users.RoleDeveloper {
		s.error(w, r, errNotFound)
		return
	}
	planID, perr := formPlanID(r)
	if perr == nil {
		// ux2: an archived plan is offered to no developer not on it.
		if perr = s.offeredPlan(r, planID, before.PlanID); perr != nil && !errors.Is(perr, errArchivedPlan) {
			s.error(w, r, perr)
			return
		}
	}
	version, _ := strconv.Atoi(r.PostFormValue("version"))
	var message string
	status := http.StatusUnprocessableEntity
	if perr != nil {
		message = perr.Error()
	} else {
		after, err := s.deps.Users.SetPlan(ctx, id, planID, version)
		switch {
		case err == nil:
			// users.Repo does not audit; the UI records who did it.
			if aerr := audit.Record(ctx, s.deps.Pool, s.actor(r), "user.set_plan", audit.ObjectUser,
				strconv.FormatInt(id, 10), before, after); aerr != nil {
				s.log.Error("audit developer plan change", "user_id", id, "err", aerr)
			}
			http.Redirect(w, r, "/admin/developers?saved=1", http.StatusSeeOther)
			return
		case errors.Is(err, users.ErrUnknownPlan):
			message = "That plan no longer exists."
		case errors.Is(err, users.ErrConflict):
			message = "Someone else changed this developer first; the current plan is shown. Try again."
			status = http.StatusConflict
		default:
			s.error(w, r, err)
			return
		}
	}
	l, err := s.developersData(r, "")
	if err != nil {
		s.error(w, r, err)
		return
	}
	l.ErrorFor, l.Error = id, message
	s.render(w, r, status, views.DevelopersPage(s.page(r, "Developers", "developers"), l))
}
