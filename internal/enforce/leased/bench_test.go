package leased_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/testenv"
)

// BenchmarkPrecision decides one hot subject's two token buckets (too high
// to reject) in parallel, through the lease store over Redis, for each
// precision, and on the memory store for scale: run with -count and
// compare medians. takes/1k-admitted is the leases' script calls.
func BenchmarkPrecision(b *testing.B) {
	limits := func(p enforce.Precision) []enforce.Limit {
		return []enforce.Limit{
			{Name: "global", Algorithm: enforce.TokenBucket, Limit: 1_000_000_000, Window: time.Second, Precision: p},
			{Name: "items", Algorithm: enforce.TokenBucket, Limit: 1_000_000_000, Window: time.Second, Precision: p},
		}
	}
	for _, c := range []struct {
		name string
		p    enforce.Precision
	}{{"exact", enforce.PrecisionExact}, {"leased", enforce.PrecisionLeased}, {"local", enforce.PrecisionLocal}} {
		b.Run("redis/"+string(c.name), func(b *testing.B) {
			_, prefix := testenv.Redis(b)
			s := instanceB(b, prefix)
			req := enforce.Request{Subject: "dev:hot", Limits: limits(c.p)}
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if d, err := s.Allow(context.Background(), req); err != nil || !d.Allowed {
						b.Fatalf("%v %+v", err, d)
					}
				}
			})
			b.ReportMetric(1000*float64(s.Stats().Takes.Load())/float64(b.N), "takes/1k-admitted")
		})
	}
	b.Run("memory", func(b *testing.B) {
		s := memstore.New(memstore.Options{})
		req := enforce.Request{Subject: "dev:hot", Limits: limits("")}
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if d, err := s.Allow(context.Background(), req); err != nil || !d.Allowed {
					b.Fatalf("%v %+v", err, d)
				}
			}
		})
	})
}
