package guard_test

import (
	"context"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/guard"
)

// TestGuardDecisionsLabelledWayInGuard: with Options.Registerer, a guard's
// decisions are counted as the portal counts its own, under way_in="guard".
func TestGuardDecisionsLabelledWayInGuard(t *testing.T) {
	p := newPortal(t)
	reg := prometheus.NewRegistry()
	g, err := guard.New(context.Background(), guard.Options{PortalURL: p.url, Token: p.token, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	mux := http.NewServeMux()
	mux.Handle("GET /items/{id}", g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	for range 4 { // the plan's 3 an hour, then a 429
		r := httptest.NewRequest("GET", "/items/1", nil)
		r.Header.Set("X-API-Key", p.secret)
		mux.ServeHTTP(httptest.NewRecorder(), r)
	}
	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sluice_enforce_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			got[strings.Join(labels, ",")] = m.GetCounter().GetValue()
		}
	}
	want := map[string]float64{
		"outcome=admitted,plan=basic,route=GET /items/{id},way_in=guard": 3,
		"outcome=rejected,plan=basic,route=GET /items/{id},way_in=guard": 1,
	}
	if !maps.Equal(got, want) {
		t.Errorf("sluice_enforce_requests_total = %v, want %v", got, want)
	}
}
