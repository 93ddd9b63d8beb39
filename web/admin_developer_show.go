package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"

	"github.com/sluicehq/sluice/internal/billing"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/quotas"
	"github.com/sluicehq/sluice/internal/users"
	"github.com/sluicehq/sluice/views"
)

// developerShow is an operator's page of one developer: their quotas this
// period (grant, reset) and their billing anchor.
func (s *Server) developerShow(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "id")
	if err != nil {
		s.error(w, r, err)
		return
	}
	v, err := s.developerView(r.Context(), id)
	if err != nil {
		s.error(w, r, err)
		return
	}
	// The outcome comes from the redirect's query: it names a quota of the
	// page, or says nothing (a crafted link cannot put words on the page).
	if q := r.URL.Query(); q.Get("limit") == "" || slices.ContainsFunc(v.Quotas, func(d views.DeveloperQuota) bool { return d.Name == q.Get("limit") }) {
		v.Message = doneMessage(q, v)
	}
	s.render(w, r, http.StatusOK, views.DeveloperPage(s.page(r, v.Developer.Email, "developers"), v))
}

// developerView reads developer id's quotas through the dashboards' store
// (Peek: nothing is consumed) and their billing anchor. A store that
// cannot be read leaves the figures out with a note.
func (s *Server) developerView(ctx context.Context, id int64) (views.DeveloperView, error) {
	u, err := s.deps.Users.ByID(ctx, id)
	if err == nil && u.Role != users.RoleDeveloper {
		err = users.ErrNotFound
	}
	if err != nil {
		return views.DeveloperView{}, err
	}
	v := views.DeveloperView{Developer: u}
	anchor, err := billing.Get(ctx, s.deps.Pool, id)
	if err != nil {
		return v, err
	}
	v.AnchorSet, v.AnchorEffective = anchor.Set, anchor.Effective
	plan, err := s.quotas.DeveloperPlan(ctx, u)
	var ve *plans.ValidationError
	if errors.As(err, &ve) {
		return v, nil // no plan: no quotas
	}
	if err != nil {
		return v, err
	}
	v.Plan = plan.Name
	var limits []enforce.Limit
	for _, l := range plan.Limits {
		if l.Algorithm == enforce.Quota {
			limits = append(limits, l.Enforce(plan.Slug))
			v.Quotas = append(v.Quotas, views.DeveloperQuota{Name: l.Name, Period: string(l.Period), Route: l.Route, PerKey: l.CountPer == plans.CountPerKey, Limit: l.Limit})
		}
	}
	if len(limits) == 0 {
		return v, nil
	}
	d, err := s.dashboard.Peek(ctx, enforce.Request{Subject: enforce.DeveloperSubject(id), Limits: limits, Anchor: anchor.Effective})
	if err != nil {
		s.log.Warn("developer quotas peek", "user_id", id, "err", err)
		v.Problem = "The rate-limit store could not be read just now: the figures are missing."
		return v, nil
	}
	at := d.At
	if at.IsZero() {
		at = s.now()
	}
	byName := make(map[string]enforce.LayerResult, len(d.Layers))
	for _, l := range d.Layers {
		byName[l.Limit.Name] = l
	}
	for i := range v.Quotas {
		l, ok := byName[limits[i].Name]
		q := &v.Quotas[i]
		if !ok || q.PerKey {
			continue
		}
		start, _ := enforce.QuotaPeriod(limits[i], anchor.Effective, at)
		if q.Granted, err = quotas.Granted(ctx, s.deps.Pool, id, plan.Slug, q.Name, start); err != nil {
			return v, err
		}
		q.Remaining = max(l.Remaining, 0)
		// Remaining is the limit plus grants less use.
		q.Used = max(q.Limit+q.Granted-l.Remaining, 0)
		q.RenewsIn, q.RenewsAt = l.ResetAfter, at.Add(l.ResetAfter).UTC()
	}
	return v, nil
}

// doneMessage says what the action a redirect reports did (?done=...), on
// the page v as it now stands.
func doneMessage(q url.Values, v views.DeveloperView) string {
	limit := q.Get("limit")
	switch q.Get("done") {
	case "grant":
		units, _ := strconv.ParseInt(q.Get("units"), 10, 64)
		return fmt.Sprintf("Granted %s of %s until the period renews. The grant is in the audit log.", views.Count(int(units), "unit", "units"), limit)
	case "reset":
		return fmt.Sprintf("Reset %s: this period's count is back to zero. The reset is in the audit log.", limit)
	case "anchor":
		return "Billing anchor set to " + views.Time(v.AnchorSet) + " UTC: quotas renew from it from the next request. The change is in the audit log."
	case "anchor-cleared":
		return "Billing anchor cleared: quotas renew from the sign-up instant again. The change is in the audit log."
	}
	return ""
}
