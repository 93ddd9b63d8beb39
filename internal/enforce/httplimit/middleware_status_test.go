package httplimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/failover"
	"github.com/sluicehq/sluice/internal/enforce/httplimit"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
)

func TestMiddlewareStatus(t *testing.T) {
	e := newMWEnv(t, httplimit.Options{})
	e.repeat(t, 63, "GET", "/api/search?q=x", "sk_test_pro")
	e.repeat(t, 4, "GET", "/api/items/9", "sk_test_pro")
	want := httplimit.StatusBody{Plan: "pro", Limits: []httplimit.LimitStatus{
		{Policy: "pro-global", Route: "", Algorithm: enforce.FixedWindow, Mode: enforce.ModeReject, Limit: 10000,
			WindowSeconds: 3600, Burst: 0, Cost: 1, Remaining: 9933, Reset: 1724191200, ResetAfterSeconds: 2423},
		{Policy: "pro-search", Route: routeSearch, Algorithm: enforce.FixedWindow, Mode: enforce.ModeReject, Limit: 100,
			WindowSeconds: 60, Burst: 0, Cost: 1, Remaining: 37, Reset: 1724188800, ResetAfterSeconds: 23},
	}}
	// Twice: reading the status must consume nothing.
	for i := range 2 {
		w := e.do("GET", "/api/rate-limit-status", "sk_test_pro")
		if w.Code != http.StatusOK {
			t.Fatalf("status %d: %s", w.Code, w.Body)
		}
		wantHeaders := map[string]string{
			"X-RateLimit-Limit": "100", "X-RateLimit-Remaining": "37", "X-RateLimit-Reset": "1724188800",
			"RateLimit-Policy": `"pro-global";q=10000;w=3600, "pro-search";q=100;w=60`,
			"RateLimit":        `"pro-global";r=9933;t=2423, "pro-search";r=37;t=23`,
			"Content-Type":     "application/json",
		}
		for _, h := range rateLimitHeaders {
			if got := w.Header().Get(h); got != wantHeaders[h] {
				t.Errorf("read %d: %s = %q, want %q", i, h, got, wantHeaders[h])
			}
		}
		var got httplimit.StatusBody
		dec := json.NewDecoder(w.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&got); err != nil {
			t.Fatal(err)
		}
		if got.Plan != want.Plan || len(got.Limits) != len(want.Limits) {
			t.Fatalf("read %d: body %+v, want %+v", i, got, want)
		}
		for j := range want.Limits {
			if got.Limits[j] != want.Limits[j] {
				t.Errorf("read %d: limit %d = %+v, want %+v", i, j, got.Limits[j], want.Limits[j])
			}
		}
	}
	t.Run("InvalidKeyIs401", func(t *testing.T) {
		if w := e.do("GET", "/api/rate-limit-status", "sk_wrong"); w.Code != http.StatusUnauthorized {
			t.Errorf("status %d", w.Code)
		}
	})
	t.Run("AnonymousSeesItsPerIPLimits", func(t *testing.T) {
		w := e.do("GET", "/api/rate-limit-status", "")
		var got httplimit.StatusBody
		if err := json.NewDecoder(w.Body).Decode(&got); err != nil {
			t.Fatal(err)
		}
		if got.Plan != "anonymous" || len(got.Limits) != 1 || got.Limits[0].Policy != "anon-items" || got.Limits[0].Remaining != 2 {
			t.Errorf("anonymous status %+v", got)
		}
	})
}

func TestMiddlewareMetrics(t *testing.T) {
	e := newMWEnv(t, httplimit.Options{})
	e.do("GET", "/api/items/1", "")
	e.do("GET", "/api/items/1", "")
	e.do("GET", "/api/items/1", "")
	e.do("GET", "/api/items/1", "sk_bad")
	cases := []struct {
		route, plan, outcome string
		want                 float64
	}{
		{routeItems, "anonymous", "admitted", 2},
		{routeItems, "anonymous", "rejected", 1},
		{routeItems, "", "unauthorized", 1},
	}
	for _, tc := range cases {
		got := gatherValue(t, e.reg, "sluice_enforce_requests_total", map[string]string{"route": tc.route, "plan": tc.plan, "outcome": tc.outcome})
		if got != tc.want {
			t.Errorf("%s/%s/%s = %v, want %v", tc.route, tc.plan, tc.outcome, got, tc.want)
		}
	}
	if n := gatherCount(t, e.reg, "sluice_enforce_decision_seconds", map[string]string{"route": routeItems}); n != 3 {
		t.Errorf("decision latency observed %d times, want 3 (401s make no decision)", n)
	}
}

// TestMiddlewareMetricsPerPlan: the route cache keeps the series of the
// plan whose caller filled it; callers of another plan that share the same
// limits slice (a resolver may hand it to several) are still counted under
// their own plan, and every decision's latency is observed once.
func TestMiddlewareMetricsPerPlan(t *testing.T) {
	limits := []enforce.Limit{
		{Name: "shared", Algorithm: enforce.FixedWindow, Limit: 3, Window: time.Hour},
		{Name: "shared-items", Algorithm: enforce.FixedWindow, Limit: 1000, Window: time.Hour, Route: routeItems},
		{Name: "shared-search", Algorithm: enforce.FixedWindow, Limit: 1000, Window: time.Hour, Route: routeSearch},
	}
	res := &mwResolver{Keys: map[string]enforce.Caller{
		"sk_a": {Subject: "dev:1", Plan: "plan-a", Limits: limits},
		"sk_b": {Subject: "dev:2", Plan: "plan-b", Limits: limits},
	}}
	reg := prometheus.NewRegistry()
	mw := httplimit.NewMiddleware(memstore.New(memstore.Options{}), res, httplimit.Options{Registerer: reg})
	mux := http.NewServeMux()
	mux.Handle(routeItems, mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	do := func(key string) int {
		r := httptest.NewRequest("GET", "/api/items/1", nil)
		r.Header.Set("Authorization", "Bearer "+key)
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		return w.Code
	}
	// a fills the cache (the second time in a row it filters the slice),
	// then both plans alternate past their limit of 3.
	for _, key := range []string{"sk_a", "sk_a", "sk_b", "sk_a", "sk_b", "sk_b", "sk_a", "sk_b", "sk_b"} {
		do(key)
	}
	cases := []struct {
		plan, outcome string
		want          float64
	}{
		{"plan-a", "admitted", 3},
		{"plan-a", "rejected", 1},
		{"plan-b", "admitted", 3},
		{"plan-b", "rejected", 2},
	}
	for _, tc := range cases {
		got := gatherValue(t, reg, "sluice_enforce_requests_total", map[string]string{"route": routeItems, "plan": tc.plan, "outcome": tc.outcome})
		if got != tc.want {
			t.Errorf("%s/%s = %v, want %v", tc.plan, tc.outcome, got, tc.want)
		}
	}
	if n := gatherCount(t, reg, "sluice_enforce_decision_seconds", map[string]string{"route": routeItems}); n != 9 {
		t.Errorf("decision latency observed %d times, want 9", n)
	}
}

// gatherValue reads one counter or gauge series from reg, as a scrape would;
// a missing series reads 0.
func gatherValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	if m := findSeries(t, reg, name, labels); m != nil {
		if c := m.GetCounter(); c != nil {
			return c.GetValue()
		}
		return m.GetGauge().GetValue()
	}
	return 0
}

// gatherCount reads a histogram series' sample count from reg.
func gatherCount(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) uint64 {
	t.Helper()
	if m := findSeries(t, reg, name, labels); m != nil {
		return m.GetHistogram().GetSampleCount()
	}
	return 0
}

func findSeries(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) *dto.Metric {
	t.Helper()
	if name == "sluice_enforce_requests_total" || name == "sluice_enforce_decision_seconds" {
		if _, ok := labels["way_in"]; !ok {
			// The decisions of a middleware made without Options.WayIn.
			labels = maps.Clone(labels)
			labels["way_in"] = httplimit.WayInMiddleware
		}
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, l := range m.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue series
				}
			}
			return m
		}
	}
	return nil
}

// brokenResolver fails the way an unloaded snapshot does: an error that is
// not ErrInvalidKey.
type brokenResolver struct{ mwResolver }

func (*brokenResolver) ResolveKey(string) (enforce.Caller, error) {
	return enforce.Caller{}, errors.New("snapshot not loaded")
}

func TestMiddlewareResolverFailureIs503NotAnonymous(t *testing.T) {
	res := &brokenResolver{}
	store := memstore.New(memstore.Options{})
	mw := httplimit.NewMiddleware(store, res, httplimit.Options{})
	ran := false
	h := mw.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran = true }))
	r := httptest.NewRequest("GET", "/api/items/1", nil)
	r.Header.Set("X-API-Key", "sk_perhaps_valid")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	raw := w.Body.String()
	var body httplimit.ErrorBody
	if err := json.Unmarshal([]byte(raw), &body); err != nil {
		t.Fatal(err)
	}
	if w.Code != http.StatusServiceUnavailable || body.Error != "identity_unavailable" || ran || res.AnonCalls.Load() != 0 {
		t.Errorf("status %d body %+v handler ran %v anonymous calls %d", w.Code, body, ran, res.AnonCalls.Load())
	}
	if strings.Contains(raw, "snapshot") {
		t.Errorf("internal error text leaked: %s", raw)
	}
}

// tickingClock advances by step after every reading, as a real clock moves
// between the store's decision and the middleware's headers.
type tickingClock struct {
	mu   sync.Mutex
	now  time.Time
	step time.Duration
}

func (c *tickingClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.now
	c.now = c.now.Add(c.step)
	return t
}

// unstampedStore hides the store's decision time, as a store that does not
// report Decision.At would.
type unstampedStore struct{ enforce.Store }

func (s unstampedStore) Allow(ctx context.Context, req enforce.Request) (enforce.Decision, error) {
	d, err := s.Store.Allow(ctx, req)
	d.At = time.Time{}
	return d, err
}

func (s unstampedStore) Peek(ctx context.Context, req enforce.Request) (enforce.Decision, error) {
	d, err := s.Store.Peek(ctx, req)
	d.At = time.Time{}
	return d, err
}

func TestMiddlewareResetIsTheLayersEnd(t *testing.T) {
	// The clock moves 250 ms at every reading, so a reset computed from a
	// reading taken after the decision would land a second late.
	cases := []struct {
		name       string
		unstamped  bool
		limit      enforce.Limit
		wantReset  string // X-RateLimit-Reset after one request
		wantStatus int64  // the status body's reset for the same limit
	}{
		{
			// t0 is 23 s before a minute boundary: the window ends on a
			// whole second, reported as exactly that second.
			name:      "FixedWindowEndsOnAWholeSecond",
			limit:     enforce.Limit{Name: "fw", Algorithm: enforce.FixedWindow, Limit: 5, Window: time.Minute},
			wantReset: "1724188800", wantStatus: 1724188800,
		},
		{
			// One token of a 10/s bucket is back 100 ms after it was spent:
			// a fraction of a second, rounded up.
			name:      "TokenBucketRoundsAFractionUp",
			limit:     enforce.Limit{Name: "tb", Algorithm: enforce.TokenBucket, Limit: 10, Window: time.Second},
			wantReset: "1724188778", wantStatus: 1724188778,
		},
		{
			// Without the store's time, the middleware's reading from just
			// before the decision stands in, never a later one.
			name: "StoreWithoutDecisionTime", unstamped: true,
			limit:     enforce.Limit{Name: "fw", Algorithm: enforce.FixedWindow, Limit: 5, Window: time.Minute},
			wantReset: "1724188800", wantStatus: 1724188800,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clock := &tickingClock{now: t0, step: 250 * time.Millisecond}
			var store enforce.Store = memstore.New(memstore.Options{Now: clock.Now})
			if tc.unstamped {
				store = unstampedStore{store}
			}
			res := &mwResolver{AnonLimits: []enforce.Limit{tc.limit}}
			mw := httplimit.NewMiddleware(store, res, httplimit.Options{Now: clock.Now})
			mux := http.NewServeMux()
			mux.Handle(routeItems, mw.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
			mux.Handle(routeStatus, mw.StatusHandler())
			do := func(path string) *httptest.ResponseRecorder {
				r := httptest.NewRequest("GET", path, nil)
				r.RemoteAddr = "203.0.113.9:5123"
				w := httptest.NewRecorder()
				mux.ServeHTTP(w, r)
				return w
			}
			w := do("/api/items/1")
			if w.Code != http.StatusOK || w.Header().Get("X-RateLimit-Reset") != tc.wantReset {
				t.Errorf("status %d X-RateLimit-Reset %q, want 200 %q", w.Code, w.Header().Get("X-RateLimit-Reset"), tc.wantReset)
			}
			// The status endpoint peeks later still; the same layer reports
			// the same reset instant.
			w = do("/api/rate-limit-status")
			var body httplimit.StatusBody
			if err := json.NewDecoder(w.Body).Decode(&body); err != nil {
				t.Fatal(err)
			}
			if len(body.Limits) != 1 || body.Limits[0].Reset != tc.wantStatus || w.Header().Get("X-RateLimit-Reset") != tc.wantReset {
				t.Errorf("status body %+v X-RateLimit-Reset %q, want reset %d and %q", body, w.Header().Get("X-RateLimit-Reset"), tc.wantStatus, tc.wantReset)
			}
		})
	}
}

// unwrappingStore wraps a store and says so, as the playground's traffic
// recorder does.
type unwrappingStore struct{ enforce.Store }

func (s unwrappingStore) Unwrap() enforce.Store { return s.Store }

func TestMiddlewareReadsNoClockWhenTheStoreStampsItsDecisions(t *testing.T) {
	cases := []struct {
		name      string
		wrap      func(enforce.Store) enforce.Store
		wantReads bool
	}{
		{"MemoryStore", func(s enforce.Store) enforce.Store { return s }, false},
		{"WrappedWithUnwrap", func(s enforce.Store) enforce.Store { return unwrappingStore{s} }, false},
		{"Failover", func(s enforce.Store) enforce.Store {
			return failover.New(s, failover.Options{Local: memstore.New(memstore.Options{})})
		}, false},
		// A store the middleware cannot see into may leave Decision.At
		// zero: the middleware reads its clock before each decision.
		{"WrappedWithoutUnwrap", func(s enforce.Store) enforce.Store { return struct{ enforce.Store }{s} }, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var reads atomic.Int64
			now := func() time.Time { reads.Add(1); return time.Now() }
			store := tc.wrap(memstore.New(memstore.Options{}))
			res := &mwResolver{AnonLimits: []enforce.Limit{{Name: "fw", Algorithm: enforce.FixedWindow, Limit: 5, Window: time.Minute}}}
			mw := httplimit.NewMiddleware(store, res, httplimit.Options{Now: now})
			mux := http.NewServeMux()
			mux.Handle(routeItems, mw.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
			r := httptest.NewRequest("GET", "/api/items/1", nil)
			w := httptest.NewRecorder()
			mux.ServeHTTP(w, r)
			if w.Code != http.StatusOK || w.Header().Get("X-RateLimit-Reset") == "" {
				t.Fatalf("status %d X-RateLimit-Reset %q", w.Code, w.Header().Get("X-RateLimit-Reset"))
			}
			if got := reads.Load() > 0; got != tc.wantReads {
				t.Errorf("middleware read its clock %d times, want reads %t", reads.Load(), tc.wantReads)
			}
		})
	}
}

func TestMiddlewareStateSurvivesDerivedContexts(t *testing.T) {
	// The middleware's state is the handler's context itself; contexts a
	// handler derives from it must still find the state and see the
	// request's cancellation and values.
	type ctxKey struct{}
	cases := []struct {
		name       string
		cancelled  bool
		wantErr    error
		wantValue  any
		wantCaller string
	}{
		{name: "LiveRequest", wantErr: nil, wantValue: "from-the-server", wantCaller: "ip:203.0.113.9"},
		{name: "CancelledRequest", cancelled: true, wantErr: context.Canceled, wantValue: "from-the-server", wantCaller: "ip:203.0.113.9"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newMWEnv(t, httplimit.Options{})
			var gotCaller string
			var gotDecision, gotCallerOK bool
			var gotErr error
			var gotValue any
			h := e.mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ctx, cancel := context.WithTimeout(r.Context(), time.Minute)
				defer cancel()
				var c enforce.Caller
				c, gotCallerOK = httplimit.CallerFrom(ctx)
				gotCaller = c.Subject
				_, gotDecision = httplimit.DecisionFrom(ctx)
				gotErr = ctx.Err()
				gotValue = ctx.Value(ctxKey{})
			}))
			mux := http.NewServeMux()
			mux.Handle(routeItems, h)
			parent, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "from-the-server"))
			defer cancel()
			if tc.cancelled {
				cancel()
			}
			r := httptest.NewRequestWithContext(parent, "GET", "/api/items/1", nil)
			r.RemoteAddr = "203.0.113.9:5123"
			mux.ServeHTTP(httptest.NewRecorder(), r)
			if !gotCallerOK || gotCaller != tc.wantCaller || !gotDecision || gotErr != tc.wantErr || gotValue != tc.wantValue {
				t.Errorf("caller %q (%v) decision %v err %v value %v; want %q true true %v %v",
					gotCaller, gotCallerOK, gotDecision, gotErr, gotValue, tc.wantCaller, tc.wantErr, tc.wantValue)
			}
		})
	}
}
