package web

import (
	"net/http"

	"github.com/sluicehq/sluice/views"
)

// usageOverview is the operator's landing page: admitted and rejected
// traffic over the last hour, top consumers, top rejected endpoints. htmx
// refreshes the figures every bucket.
func (s *Server) usageOverview(w http.ResponseWriter, r *http.Request) {
	sum := s.usageSummary(r.Context())
	o := views.Overview{
		Buckets:      sum.buckets,
		Total:        sum.total,
		TopConsumers: sum.topConsumers,
		TopRejected:  sum.topRejected,
		Note:         sum.note,
		Regions:      s.regionsView(r.Context(), sum.total),
		Anonymous:    s.anonymousTraffic(r.Context()),
	}
	if isHTMX(r) {
		s.render(w, r, http.StatusOK, views.OverviewFragment(o))
		return
	}
	s.render(w, r, http.StatusOK, views.OverviewPage(s.page(r, "Usage", "usage"), o))
}
