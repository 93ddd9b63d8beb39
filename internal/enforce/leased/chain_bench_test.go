package leased_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/failover"
	"github.com/sluicehq/sluice/internal/enforce/leased"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/enforce/redisstore"
	quotas "github.com/sluicehq/sluice/internal/ledger"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/traffic"
)

// BenchmarkPortalChain decides scripts/bench.sh's "key" contender (one
// developer key, two token buckets like the bench plan's, higher, so that
// no run of b.N drains them) in parallel through the store chains the
// portal builds (cmd/portal/server.go) with the middleware's AllowInto: the
// memory portal's traffic -> ledger -> memory store, and the Redis
// portal's traffic -> leased -> ledger -> failover -> Redis store with both
// limits leased. cpu-ns/op is the process's CPU time (user and system) per
// decision, which other processes' load moves much less than ns/op. Run
// with -count and compare medians: the leased chain's target is the memory
// chain's cost.
func BenchmarkPortalChain(b *testing.B) {
	limits := func(p enforce.Precision) []enforce.Limit {
		return []enforce.Limit{
			{Name: "global", Algorithm: enforce.TokenBucket, Limit: 1_000_000_000, Burst: 1_000_000_000, Window: time.Second, Precision: p},
			{Name: "items", Route: "GET /api/items/{id}", Algorithm: enforce.TokenBucket, Limit: 1_000_000_000, Burst: 1_000_000_000, Window: time.Second, Precision: p},
		}
	}
	run := func(b *testing.B, store enforce.Store, req enforce.Request) {
		rec := traffic.NewRecorder(traffic.NewMemorySink(), traffic.Options{})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = rec.Run(ctx) }()
		defer func() { cancel(); <-done }()
		chain := traffic.Wrap(store, rec)
		b.SetParallelism(32) // wrk's 64 connections on two cores
		b.ReportAllocs()
		before := cpuTime(b)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			layers := make([]enforce.LayerResult, len(req.Limits))
			for pb.Next() {
				if d, err := chain.AllowInto(context.Background(), req, layers); err != nil || !d.Allowed {
					b.Errorf("%v %+v", err, d)
					return
				}
			}
		})
		b.StopTimer()
		b.ReportMetric(float64(cpuTime(b)-before)/float64(b.N), "cpu-ns/op")
	}
	req := func(p enforce.Precision) enforce.Request {
		return enforce.Request{Subject: "user:1", Key: "7", Route: "GET /api/items/{id}", Limits: limits(p)}
	}
	b.Run("memory", func(b *testing.B) {
		mem := memstore.New(memstore.Options{})
		run(b, quotas.New(mem, nil, quotas.Options{Shared: mem}), req(""))
	})
	b.Run("leased", func(b *testing.B) {
		_, prefix := testenv.Redis(b)
		opts, err := redis.ParseURL(testenv.RedisURL(b))
		if err != nil {
			b.Fatal(err)
		}
		client := redis.NewClient(opts)
		defer client.Close()
		rs, err := redisstore.New(client, redisstore.Options{Prefix: prefix})
		if err != nil {
			b.Fatal(err)
		}
		defer rs.Close()
		lz := leased.New(quotas.New(failover.New(rs, failover.Options{}), nil, quotas.Options{Shared: rs}), rs, leased.Options{})
		defer lz.Close()
		run(b, lz, req(enforce.PrecisionLeased))
		b.StopTimer()
		b.ReportMetric(1000*float64(lz.Stats().Takes.Load())/float64(b.N), "takes/1k-admitted")
	})
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
