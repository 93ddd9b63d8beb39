package requestlog_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/httplimit"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/requestlog"
	"github.com/sluicehq/sluice/internal/testenv"
)

// anonResolver gives every caller one anonymous caller with limits.
type anonResolver struct{ c enforce.Caller }

func (r anonResolver) ResolveKey(string) (enforce.Caller, error) { return r.c, nil }
func (r anonResolver) Anonymous(netip.Addr) enforce.Caller       { return r.c }

// discard is a ResponseWriter that keeps nothing.
type discard struct{ h http.Header }

func (w *discard) Header() http.Header         { return w.h }
func (w *discard) Write(b []byte) (int, error) { return len(b), nil }
func (w *discard) WriteHeader(int)             {}

// BenchmarkDecisionWithLog is a decision through the embedded middleware on
// the memory store (two limits, never over) without the request log ("off")
// and with the middleware logging every decision (Options.RequestLog: the
// handler's status and latency, then Writer.Log; the writer samples one
// admission in 100 and writes to the test Postgres as it does in the
// portal).
// Compare the two with benchstat over interleaved -count runs:
//
//	go test -run '^$' -bench DecisionWithLog -count 10 ./internal/requestlog/
func BenchmarkDecisionWithLog(b *testing.B) {
	limits := []enforce.Limit{
		{Name: "bench-global", Algorithm: enforce.TokenBucket, Limit: 1_000_000_000, Window: time.Second},
		{Name: "bench-items", Algorithm: enforce.FixedWindow, Limit: 1_000_000_000, Window: time.Minute, Route: "GET /api/items/{id}"},
	}
	res := anonResolver{enforce.Caller{Subject: "ip:192.0.2.1", Plan: "anonymous", Limits: limits}}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	pool := testenv.Postgres(b)
	for _, on := range []bool{false, true} {
		opts := httplimit.Options{}
		name := "off"
		if on {
			name = "on"
			w := requestlog.NewWriter(pool, requestlog.Options{})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); _ = w.Run(ctx) }()
			b.Cleanup(func() { cancel(); <-done })
			opts.RequestLog = w
		}
		mux := http.NewServeMux()
		mux.Handle("GET /api/items/{id}", httplimit.NewMiddleware(memstore.New(memstore.Options{DisableUsage: true}), res, opts).Wrap(ok))
		b.Run(name+"/serial", func(b *testing.B) {
			r := httptest.NewRequest("GET", "/api/items/42", nil)
			w := &discard{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				clear(w.h)
				mux.ServeHTTP(w, r)
			}
		})
		b.Run(name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				r := httptest.NewRequest("GET", "/api/items/42", nil)
				w := &discard{h: http.Header{}}
				for pb.Next() {
					clear(w.h)
					mux.ServeHTTP(w, r)
				}
			})
		})
	}
}
