package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/failover"
	"github.com/sluicehq/sluice/internal/enforce/httplimit"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/enforce/redisstore"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/traffic"
)

// discardWriter is a ResponseWriter that keeps nothing, so the benchmarks
// measure the middleware rather than a recorder.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *discardWriter) WriteHeader(int)             {}

// BenchmarkMiddleware measures what the middleware adds to one request on
// the memory store: identify (anonymous, by RemoteAddr), filter two layers,
// decide, write five headers, hand over the context. "bare" is the same mux
// and handler without it; "failover" adds the FailoverStore's per-call
// timeout goroutine; "redis" is the Redis store on the test Redis, its
// parallel run with 64 goroutines sharing the one anonymous subject, whose
// decisions the store coalesces; "slots" adds a concurrency limit, whose
// slot every request takes and gives back. Figures: see the README's
// benchmark section and docs/benchmarks.md.
//
//	go test -run '^$' -bench BenchmarkMiddleware -benchmem ./internal/enforce/
func BenchmarkMiddleware(b *testing.B) {
	never := []enforce.Limit{
		{Name: "bench-global", Algorithm: enforce.TokenBucket, Limit: 1_000_000_000, Window: time.Second},
		{Name: "bench-items", Algorithm: enforce.FixedWindow, Limit: 1_000_000_000, Window: time.Minute, Route: routeItems},
	}
	res := &mwResolver{AnonLimits: never}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	mem := func() enforce.Store { return memstore.New(memstore.Options{DisableUsage: true}) }
	cases := []struct {
		name string
		wrap func(http.Handler) http.Handler
	}{
		{"bare", func(h http.Handler) http.Handler { return h }},
		{"memory", func(h http.Handler) http.Handler {
			return httplimit.NewMiddleware(mem(), res, httplimit.Options{}).Wrap(h)
		}},
		{"failover", func(h http.Handler) http.Handler {
			return httplimit.NewMiddleware(failover.New(mem(), failover.Options{}), res, httplimit.Options{}).Wrap(h)
		}},
		// "recording" is "memory" with the playground's traffic recorder
		// wrapped around the store, its aggregator draining the buffer.
		{"recording", func(h http.Handler) http.Handler {
			rec := traffic.NewRecorder(traffic.NewMemorySink(), traffic.Options{})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); _ = rec.Run(ctx) }()
			b.Cleanup(func() {
				cancel()
				<-done
				b.Logf("recording: %d arrivals dropped by a full buffer", rec.Dropped())
			})
			return httplimit.NewMiddleware(traffic.Wrap(mem(), rec), res, httplimit.Options{}).Wrap(h)
		}},
		{"redis", func(h http.Handler) http.Handler {
			client, prefix := testenv.Redis(b)
			store, err := redisstore.New(client, redisstore.Options{Prefix: prefix, Timeout: time.Second})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { store.Close() })
			return httplimit.NewMiddleware(store, res, httplimit.Options{}).Wrap(h)
		}},
	}
	// "rejected" answers every request but the first 429: the path a flood
	// of over-limit traffic takes.
	cases = append(cases, struct {
		name string
		wrap func(http.Handler) http.Handler
	}{"rejected", func(h http.Handler) http.Handler {
		over := &mwResolver{AnonLimits: []enforce.Limit{
			{Name: "bench-global", Algorithm: enforce.TokenBucket, Limit: 1, Window: time.Hour},
			{Name: "bench-items", Algorithm: enforce.FixedWindow, Limit: 1, Window: time.Hour, Route: routeItems},
		}}
		return httplimit.NewMiddleware(mem(), over, httplimit.Options{}).Wrap(h)
	}})
	// "slots" adds a concurrency limit to the two layers: every request
	// takes a slot before the rate layers are decided and gives it back
	// when the handler returns.
	cases = append(cases, struct {
		name string
		wrap func(http.Handler) http.Handler
	}{"slots", func(h http.Handler) http.Handler {
		held := &mwResolver{AnonLimits: append([]enforce.Limit{
			{Name: "bench-inflight", Algorithm: enforce.Concurrency, Limit: 1_000_000},
		}, never...)}
		return httplimit.NewMiddleware(mem(), held, httplimit.Options{}).Wrap(h)
	}})
	for _, tc := range cases {
		mux := http.NewServeMux()
		mux.Handle(routeItems, tc.wrap(ok))
		b.Run(tc.name+"/serial", func(b *testing.B) {
			r := httptest.NewRequest("GET", "/api/items/42", nil)
			w := &discardWriter{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				clear(w.h)
				mux.ServeHTTP(w, r)
			}
		})
		b.Run(tc.name+"/parallel", func(b *testing.B) {
			if tc.name == "redis" {
				b.SetParallelism(32)
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				r := httptest.NewRequest("GET", "/api/items/42", nil)
				w := &discardWriter{h: http.Header{}}
				for pb.Next() {
					clear(w.h)
					mux.ServeHTTP(w, r)
				}
			})
		})
	}
}
