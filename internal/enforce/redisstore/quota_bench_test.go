package redisstore

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
)

// BenchmarkQuotaLayer: decisions/s of a two-layer request (a plan-wide
// fixed window and a route's token bucket) beside the same request with a
// monthly quota added, anchored per subject, in one run: 64 callers, 1,000
// subjects, the rounds alternating so both see the same machine
// (go test -run '^$' -bench QuotaLayer -benchtime 20000x ./internal/enforce).
//
// 2026-12-01, 2-core machine shared with four other engineers' builds and
// tests (load average 3 - 5), private prefix on the shared Redis 7:
// see README's Benchmarks section for the figures.
func BenchmarkQuotaLayer(b *testing.B) {
	two := []enforce.Limit{
		{Name: "fw", Algorithm: enforce.FixedWindow, Limit: 1e12, Window: time.Hour},
		{Name: "tb", Algorithm: enforce.TokenBucket, Limit: 1e12, Window: time.Minute, PerKey: true},
	}
	three := append(slices.Clone(two), enforce.Limit{Name: "monthly", Algorithm: enforce.Quota, Period: enforce.PeriodMonth, Limit: 1e12})
	anchors := make([]time.Time, 1000)
	for i := range anchors {
		anchors[i] = time.Date(2026, time.Month(1+i%12), 1+i%31, i%24, 0, 0, 0, time.UTC)
	}
	for _, kind := range []string{"Redis", "Memory"} {
		b.Run(kind, func(b *testing.B) {
			var store enforce.Store
			if kind == "Redis" {
				client, prefix := benchRedisClient(b)
				store = newTestRedisStore(b, client, Options{Prefix: prefix, Timeout: time.Second})
			} else {
				store = memstore.New(memstore.Options{})
			}
			rounds := 5
			n := max(b.N/rounds, 1000)
			var base, quota []float64
			b.ResetTimer()
			for range rounds {
				for _, cfg := range []struct {
					limits []enforce.Limit
					out    *[]float64
				}{{two, &base}, {three, &quota}} {
					rate, _, err := measureCallers(n, func(ctx context.Context, i int) error {
						s := i % len(anchors)
						d, err := store.Allow(ctx, enforce.Request{Subject: "dev:" + strconv.Itoa(s), Key: "key:1", Route: "GET /x", Limits: cfg.limits, Anchor: anchors[s]})
						if err == nil && !d.Allowed {
							err = fmt.Errorf("rejected")
						}
						return err
					})
					if err != nil {
						b.Fatal(err)
					}
					*cfg.out = append(*cfg.out, rate)
				}
			}
			b.StopTimer()
			median := func(v []float64) float64 { slices.Sort(v); return v[len(v)/2] }
			b.ReportMetric(median(base), "2layers-decisions/s")
			b.ReportMetric(median(quota), "2layers+quota-decisions/s")
			b.ReportMetric(median(quota)/median(base), "quota/2layers")
			b.ReportMetric(0, "ns/op")
		})
	}
}
