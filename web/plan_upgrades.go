package web

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/views"
)

// maxUpgradesShown bounds the requests a page lists.
const maxUpgradesShown = 50

// myPlan shows the developer's plan, the plans they may ask for and what
// became of their requests.
func (s *Server) myPlan(w http.ResponseWriter, r *http.Request) {
	v, err := s.myPlanData(r)
	if err != nil {
		s.error(w, r, err)
		return
	}
	v.Sent = r.URL.Query().Get("sent") != ""
	s.render(w, r, http.StatusOK, views.MyPlanPage(s.page(r, "My plan", "app-plan"), v))
}

func (s *Server) myPlanData(r *http.Request) (views.MyPlan, error) {
	u, _ := s.currentUser(r)
	all, err := s.deps.Plans.List(r.Context())
	if err != nil {
		return views.MyPlan{}, err
	}
	current, err := s.viewerPlan(r, all)
	if err != nil {
		return views.MyPlan{}, err
	}
	reqs, err := s.deps.Plans.UpgradeRequestsOf(r.Context(), u.ID, maxUpgradesShown)
	if err != nil {
		return views.MyPlan{}, err
	}
	v := views.MyPlan{Plan: current.Name, Choices: plans.UpgradeChoices(all, current.ID), Requests: reqs, Errors: views.FieldErrors{}}
	for i := range reqs {
		if reqs[i].Status == plans.UpgradePending {
			v.Pending = &reqs[i]
		}
	}
	return v, nil
}

// requestUpgrade records the developer's request for another public plan.
func (s *Server) requestUpgrade(w http.ResponseWriter, r *http.Request) {
	if err := parseForm(w, r); err != nil {
		s.error(w, r, err)
		return
	}
	u, _ := s.currentUser(r)
	planID, _ := strconv.ParseInt(r.PostFormValue("plan_id"), 10, 64)
	_, err := s.deps.Plans.RequestUpgrade(r.Context(), u.ID, planID)
	var ve *plans.ValidationError
	switch {
	case err == nil:
		s.log.Info("upgrade requested", "user_id", u.ID, "plan_id", planID)
		http.Redirect(w, r, "/app/plan?sent=1", http.StatusSeeOther)
		return
	case errors.As(err, &ve), errors.Is(err, plans.ErrUpgradePending):
	default:
		s.error(w, r, err)
		return
	}
	v, derr := s.myPlanData(r)
	if derr != nil {
		s.error(w, r, derr)
		return
	}
	status := http.StatusUnprocessableEntity
	if ve != nil {
		v.Errors["plan_id"] = ve.Fields[0].Message
	} else {
		status = http.StatusConflict
	}
	s.render(w, r, status, views.MyPlanPage(s.page(r, "My plan", "app-plan"), v))
}

// upgradesList shows the requests waiting for an operator and the latest
// decided ones.
func (s *Server) upgradesList(w http.ResponseWriter, r *http.Request) {
	l := views.UpgradesList{}
	if id, err := strconv.ParseInt(r.URL.Query().Get("decided"), 10, 64); err == nil {
		l.DoneID = id
	}
	s.renderUpgrades(w, r, http.StatusOK, l)
}

func (s *Server) renderUpgrades(w http.ResponseWriter, r *http.Request, status int, l views.UpgradesList) {
	all, err := s.deps.Plans.UpgradeRequests(r.Context(), "", maxUpgradesShown*2)
	if err != nil {
		s.error(w, r, err)
		return
	}
	for _, q := range all {
		if l.DoneID != 0 && q.ID == l.DoneID && q.Status != plans.UpgradePending {
			l.Done = q.Email + ": " + views.UpgradeOutcome(q) + " (" + q.PlanName + ")."
		}
		switch {
		case q.Status == plans.UpgradePending:
			l.Pending = append(l.Pending, q)
		case len(l.Decided) < maxUpgradesShown:
			l.Decided = append(l.Decided, q)
		}
	}
	s.render(w, r, status, views.UpgradesPage(s.page(r, "Upgrade requests", "developers"), l))
}

// upgradeDecide approves (the developer moves to the plan at once) or
// refuses a request, with the operator's note.
func (s *Server) upgradeDecide(w http.ResponseWriter, r *http.Request) {
	id, ok := s.postedID(w, r)
	if !ok {
		return
	}
	var approve bool
	switch r.PostFormValue("decision") {
	case "approve":
		approve = true
	case "refuse":
	default:
		s.renderUpgrades(w, r, http.StatusUnprocessableEntity, views.UpgradesList{
			Refused: "decision: choose Approve or Refuse", RefusedID: id})
		return
	}
	q, err := s.deps.Plans.DecideUpgrade(r.Context(), s.actor(r), id, approve, r.PostFormValue("note"))
	var ve *plans.ValidationError
	switch {
	case err == nil:
		s.log.Info("upgrade decided", "request_id", id, "status", q.Status)
		http.Redirect(w, r, "/admin/upgrades?decided="+strconv.FormatInt(q.ID, 10), http.StatusSeeOther)
		return
	case errors.As(err, &ve):
		f := ve.Fields[0]
		s.renderUpgrades(w, r, http.StatusUnprocessableEntity, views.UpgradesList{Refused: f.Field + ": " + f.Message, RefusedID: id})
		return
	}
	s.error(w, r, err)
}
