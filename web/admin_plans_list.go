package web

import (
	"net/http"

	"github.com/sluicehq/sluice/views"
)

// plansList shows every plan with its tiers, how many keys and developers
// are on it (set directly, through their developer, or by default), and its
// traffic over the last hour.
func (s *Server) plansList(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	all, err := s.deps.Plans.List(ctx)
	if err != nil {
		s.error(w, r, err)
		return
	}
	counts, err := s.deps.Plans.Counts(ctx)
	if err != nil {
		s.error(w, r, err)
		return
	}
	usage, note := s.planUsage(ctx)
	rows := make([]views.PlanRow, len(all))
	for i, p := range all {
		c := counts[p.ID]
		u := usage[p.ID]
		rows[i] = views.PlanRow{Plan: p, Keys: c.KeysOnPlan, Developers: c.DevelopersOnPlan, Admitted: u.Admitted, Rejected: u.Rejected}
	}
	s.render(w, r, http.StatusOK, views.PlansPage(s.page(r, "Plans", "plans"), views.PlansList{Rows: rows, UsageNote: note, Deleted: r.URL.Query().Get("deleted")}))
}
