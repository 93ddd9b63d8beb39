package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/httplimit"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
)

// TestSlotDecisionsReachTheUsageSeries: the live counters and history read
// the store's usage series; a request refused by a concurrency tier (its
// rate layers only peeked) and one admitted by slots alone are counted
// there like any other decision, by the middleware and by the engine.
func TestSlotDecisionsReachTheUsageSeries(t *testing.T) {
	for _, withRate := range []bool{false, true} {
		name := "slots-only"
		limits := []enforce.Limit{{Name: "inflight", Algorithm: enforce.Concurrency, Limit: 1}}
		if withRate {
			name = "slots-and-rate"
			limits = append(limits, enforce.Limit{Name: "rate", Algorithm: enforce.FixedWindow, Limit: 100, Window: time.Hour})
		}
		t.Run(name, func(t *testing.T) {
			store := memstore.New(memstore.Options{})
			res := &mwResolver{Keys: map[string]enforce.Caller{"sk": {Subject: "dev:9", Key: "key:90", Plan: "p", Limits: limits}}}
			mw := httplimit.NewMiddleware(store, res, httplimit.Options{})
			release := make(chan struct{})
			entered := make(chan struct{})
			mux := http.NewServeMux()
			mux.Handle("GET /slow", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				entered <- struct{}{}
				<-release
			})))
			do := func() int {
				req := httptest.NewRequest("GET", "/slow", nil)
				req.Header.Set("Authorization", "Bearer sk")
				rec := httptest.NewRecorder()
				mux.ServeHTTP(rec, req)
				return rec.Code
			}
			done := make(chan int)
			go func() { done <- do() }()
			<-entered
			for range 3 {
				if code := do(); code != http.StatusTooManyRequests {
					t.Fatalf("with the one slot held: %d, want 429", code)
				}
			}
			close(release)
			if code := <-done; code != http.StatusOK {
				t.Fatalf("the holder: %d", code)
			}
			pts, err := store.Usage(context.Background(), []string{"dev:9"}, time.Now().Add(-time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			var admitted, rejected int64
			for _, p := range pts {
				admitted += p.Admitted
				rejected += p.Rejected
			}
			if admitted != 1 || rejected != 3 {
				t.Fatalf("usage series: %d admitted, %d rejected; want 1 and 3", admitted, rejected)
			}

			// The engine (the gateways' way in) counts the same.
			e := enforce.NewEngine(store, enforce.EngineOptions{})
			caller := enforce.Caller{Subject: "dev:10", Limits: limits}
			o, err := e.Decide(context.Background(), enforce.Ask{Caller: caller, Route: "GET /slow"})
			if err != nil || !o.Allowed {
				t.Fatalf("engine: %v %+v", err, o)
			}
			if o2, _ := e.Decide(context.Background(), enforce.Ask{Caller: caller, Route: "GET /slow"}); o2.Allowed {
				t.Fatal("engine admitted a second request on a cap of 1")
			}
			o.Lease.Release(context.Background())
			pts, _ = store.Usage(context.Background(), []string{"dev:10"}, time.Now().Add(-time.Hour))
			admitted, rejected = 0, 0
			for _, p := range pts {
				admitted += p.Admitted
				rejected += p.Rejected
			}
			if admitted != 1 || rejected != 1 {
				t.Fatalf("engine's usage series: %d admitted, %d rejected; want 1 and 1", admitted, rejected)
			}
		})
	}
}
