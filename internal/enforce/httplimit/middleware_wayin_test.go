package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/httplimit"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
)

// TestWayInLabelsTheDecisionMetrics sends one key's requests through the
// embedded middleware, a WayIn("check") and a WayIn("envoy") copy of it:
// the copies share the budget (exactly the limit is admitted in all) and
// each way in's decisions are counted under its own way_in.
func TestWayInLabelsTheDecisionMetrics(t *testing.T) {
	limits := []enforce.Limit{{Name: "items", Route: routeItems, Algorithm: enforce.FixedWindow, Limit: 4, Window: time.Hour}}
	res := &mwResolver{Keys: map[string]enforce.Caller{"sk_a": {Subject: "dev:1", Key: "key:1", KeyID: 1, UserID: 1, Plan: "pro", Limits: limits}}}
	reg := prometheus.NewRegistry()
	mw := httplimit.NewMiddleware(memstore.New(memstore.Options{}), res, httplimit.Options{Registerer: reg})
	check, envoy, odd := mw.WayIn(httplimit.WayInCheck), mw.WayIn(httplimit.WayInEnvoy), mw.WayIn("made-up")
	mux := http.NewServeMux()
	mux.Handle(routeItems, mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	embedded := func() bool {
		r := httptest.NewRequest("GET", "/api/items/1", nil)
		r.Header.Set("Authorization", "Bearer sk_a")
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		return w.Code == http.StatusOK
	}
	viaCheck := func() bool {
		r := httptest.NewRequest("GET", "/v1/check", nil)
		r.Header.Set("Authorization", "Bearer sk_a")
		w := httptest.NewRecorder()
		check.Enforce(w, r, routeItems, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
		return w.Code == http.StatusOK
	}
	viaEnvoy := func() bool {
		return envoy.Check(context.Background(), httplimit.Credentials{APIKey: "sk_a"}, routeItems, 1).Status == http.StatusOK
	}
	viaOdd := func() bool {
		return odd.Check(context.Background(), httplimit.Credentials{APIKey: "sk_a"}, routeItems, 1).Status == http.StatusOK
	}
	admitted := 0
	for _, send := range []func() bool{embedded, viaCheck, viaEnvoy, embedded, viaCheck, viaEnvoy, viaOdd} {
		if send() {
			admitted++
		}
	}
	if admitted != 4 {
		t.Errorf("admitted %d through three ways in, want the limit, 4", admitted)
	}
	for _, tc := range []struct {
		wayIn, outcome string
		want           float64
	}{
		{"middleware", "admitted", 2},
		{"middleware", "rejected", 0},
		{"check", "admitted", 1},
		{"check", "rejected", 1},
		{"envoy", "admitted", 1},
		{"envoy", "rejected", 1},
		{"other", "admitted", 0},
		{"other", "rejected", 1},
	} {
		got := gatherValue(t, reg, "sluice_enforce_requests_total", map[string]string{"route": routeItems, "plan": "pro", "outcome": tc.outcome, "way_in": tc.wayIn})
		if got != tc.want {
			t.Errorf("way_in=%s outcome=%s: %v, want %v", tc.wayIn, tc.outcome, got, tc.want)
		}
	}
	for way, want := range map[string]uint64{"middleware": 2, "check": 2, "envoy": 2, "other": 1} {
		if n := gatherCount(t, reg, "sluice_enforce_decision_seconds", map[string]string{"route": routeItems, "way_in": way}); n != want {
			t.Errorf("decision latency of way_in=%s observed %d times, want %d", way, n, want)
		}
	}
}
