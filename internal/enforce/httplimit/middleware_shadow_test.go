package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/httplimit"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/enforce/redisstore"
	"github.com/sluicehq/sluice/internal/testenv"
)

// shadowLog is a ShadowRecorder that keeps what it is told.
type shadowLog struct {
	mu   sync.Mutex
	seen []httplimit.ShadowRejection
}

func (l *shadowLog) RecordShadow(r httplimit.ShadowRejection) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen = append(l.seen, r)
}

func TestMiddlewareShadowTierRejectsNothingAndCountsExactly(t *testing.T) {
	// A shadow tier of 1 per hour on a busy route, beside an enforced
	// plan-wide limit that never binds: every request is served, none shows
	// the shadow tier, and exactly n-1 would-be rejections are reported.
	client, prefix := testenv.Redis(t)
	store, err := redisstore.New(client, redisstore.Options{Prefix: prefix, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	limits := []enforce.Limit{
		{Name: "free-global", Algorithm: enforce.FixedWindow, Limit: 1_000_000, Window: time.Hour},
		{Name: "free-trial", Route: "GET /busy", Algorithm: enforce.FixedWindow, Limit: 1, Window: time.Hour, Mode: enforce.ModeShadow},
	}
	res := &mwResolver{Keys: map[string]enforce.Caller{
		"sk_shadow": {Subject: "dev:7", Key: "key:70", Plan: "free", Limits: limits},
	}}
	reg := prometheus.NewRegistry()
	log := &shadowLog{}
	mw := httplimit.NewMiddleware(store, res, httplimit.Options{Registerer: reg, Shadow: log})
	mux := http.NewServeMux()
	mux.Handle("GET /busy", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d, _ := httplimit.DecisionFrom(r.Context()); len(d.Layers) != 1 {
			t.Errorf("handler sees %d layers, want the enforced one only", len(d.Layers))
		}
		w.WriteHeader(http.StatusOK)
	})))
	mux.Handle("GET /status", mw.StatusHandler())

	const n, workers = 400, 16
	var wg sync.WaitGroup
	jobs := make(chan struct{})
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range jobs {
				req := httptest.NewRequest("GET", "/busy", nil).WithContext(context.Background())
				req.Header.Set("Authorization", "Bearer sk_shadow")
				rec := httptest.NewRecorder()
				mux.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					t.Errorf("status %d, want 200: a shadow tier never rejects", rec.Code)
				}
				for _, h := range []string{"RateLimit-Policy", "RateLimit"} {
					if v := rec.Header().Get(h); strings.Contains(v, "free-trial") || !strings.Contains(v, "free-global") {
						t.Errorf("%s = %q, want the enforced tier only", h, v)
					}
				}
			}
		}()
	}
	for range n {
		jobs <- struct{}{}
	}
	close(jobs)
	wg.Wait()

	if got := gatherValue(t, reg, "sluice_shadow_rejections_total", map[string]string{"plan": "free", "tier": "free-trial"}); got != n-1 {
		t.Errorf("sluice_shadow_rejections_total = %v, want %d", got, n-1)
	}
	if got := gatherValue(t, reg, "sluice_enforce_requests_total", map[string]string{"route": "GET /busy", "plan": "free", "outcome": "admitted"}); got != n {
		t.Errorf("admitted = %v, want %d", got, n)
	}
	log.mu.Lock()
	if len(log.seen) != n-1 {
		t.Errorf("recorder told of %d rejections, want %d", len(log.seen), n-1)
	}
	for _, r := range log.seen {
		if r.Plan != "free" || r.Tier != "free-trial" || r.Subject != "dev:7" || r.Key != "key:70" || r.At.IsZero() {
			t.Errorf("recorded %+v, want plan free, tier free-trial, dev:7, key:70, a time", r)
			break
		}
	}
	log.mu.Unlock()

	// The status endpoint does not show it either.
	req := httptest.NewRequest("GET", "/status", nil)
	req.Header.Set("Authorization", "Bearer sk_shadow")
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, req)
	if body := rec.Body.String(); rec.Code != http.StatusOK || strings.Contains(body, "free-trial") || !strings.Contains(body, "free-global") {
		t.Errorf("status %d %s, want 200 with the enforced tier only", rec.Code, body)
	}
}

func TestMiddlewareQuotaHeadersSayThePeriodAndTheRenewal(t *testing.T) {
	// Anchored on 31 January 10:00 UTC, a monthly quota on 20 February is in
	// the period 31 January - 28 February (28 days), renewing in 8 days.
	now := time.Date(2027, 2, 20, 10, 0, 0, 0, time.UTC)
	clock := newMWClock(now)
	store := memstore.New(memstore.Options{Now: clock.Now})
	limits := []enforce.Limit{{Name: "free-monthly", Algorithm: enforce.Quota, Period: enforce.PeriodMonth, Limit: 3}}
	res := &mwResolver{Keys: map[string]enforce.Caller{
		"sk_q": {Subject: "dev:9", Key: "key:90", Plan: "free", Limits: limits, Anchor: time.Date(2026, 1, 31, 10, 0, 0, 0, time.UTC)},
	}}
	mw := httplimit.NewMiddleware(store, res, httplimit.Options{Now: clock.Now})
	mux := http.NewServeMux()
	mux.Handle("GET /q", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	mux.Handle("GET /status", mw.StatusHandler())
	get := func(path string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("GET", path, nil)
		req.Header.Set("Authorization", "Bearer sk_q")
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		return rec
	}
	const period, renewal = 28 * 86400, 8 * 86400
	for i := range 3 {
		rec := get("/q")
		if rec.Code != http.StatusOK {
			t.Fatalf("request %d: %d", i, rec.Code)
		}
		policy := parseSFList(t, rec.Header().Get("RateLimit-Policy"))
		limit := parseSFList(t, rec.Header().Get("RateLimit"))
		if len(policy) != 1 || policy[0].Params["q"] != 3 || policy[0].Params["w"] != period {
			t.Errorf("RateLimit-Policy = %q, want q=3;w=%d", rec.Header().Get("RateLimit-Policy"), period)
		}
		if len(limit) != 1 || limit[0].Params["r"] != int64(2-i) || limit[0].Params["t"] != renewal {
			t.Errorf("RateLimit = %q, want r=%d;t=%d", rec.Header().Get("RateLimit"), 2-i, renewal)
		}
	}
	rec := get("/q")
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "691200" {
		t.Errorf("over the quota: %d Retry-After %q, want 429 and 691200 (8 days)", rec.Code, rec.Header().Get("Retry-After"))
	}
	rec = get("/status")
	if body := rec.Body.String(); !strings.Contains(body, `"period":"month"`) || !strings.Contains(body, `"window_seconds":2419200`) ||
		!strings.Contains(body, `"reset_after_seconds":691200`) {
		t.Errorf("status = %s, want the month's period, length and renewal", body)
	}
}

// TestShadowCountsOnlyWhatTheEnforcedTiersAdmitted: a request an enforced
// tier already refused is not one a shadow tier would have refused (it was
// never going through), so the shadow counts cover admitted requests only.
func TestShadowCountsOnlyWhatTheEnforcedTiersAdmitted(t *testing.T) {
	limits := []enforce.Limit{
		{Name: "enforced", Algorithm: enforce.FixedWindow, Limit: 3, Window: time.Hour},
		{Name: "trial", Algorithm: enforce.FixedWindow, Limit: 1, Window: time.Hour, Mode: enforce.ModeShadow},
	}
	res := &mwResolver{Keys: map[string]enforce.Caller{"sk": {Subject: "dev:8", Key: "key:80", Plan: "free", Limits: limits}}}
	reg := prometheus.NewRegistry()
	log := &shadowLog{}
	mw := httplimit.NewMiddleware(memstore.New(memstore.Options{}), res, httplimit.Options{Registerer: reg, Shadow: log})
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	codes := map[int]int{}
	for range 10 {
		req := httptest.NewRequest("GET", "/x", nil)
		req.Header.Set("Authorization", "Bearer sk")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		codes[rec.Code]++
	}
	if codes[http.StatusOK] != 3 || codes[http.StatusTooManyRequests] != 7 {
		t.Fatalf("answers %v, want 3 admitted and 7 refused by the enforced tier", codes)
	}
	// Of the 3 admitted, the shadow tier of 1 would have refused 2.
	if got := gatherValue(t, reg, "sluice_shadow_rejections_total", map[string]string{"plan": "free", "tier": "trial"}); got != 2 {
		t.Errorf("sluice_shadow_rejections_total = %v, want 2 (the refused requests are not the shadow tier's)", got)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.seen) != 2 {
		t.Errorf("recorder told of %d shadow rejections, want 2", len(log.seen))
	}
}
