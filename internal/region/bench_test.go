package region_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/redisstore"
	"github.com/sluicehq/sluice/internal/region"
	"github.com/sluicehq/sluice/internal/testenv"
)

// BenchmarkRegions measures, in real time, three regions 40 ms apart (a
// delaying proxy each way) with a client at twice a limit of 100/s spread
// evenly, for each mode and algorithm: the most admitted beyond the limit in
// one whole window (a bucket: once its capacity is spent), the bound
// docs/regions.md states for it, and each region's decision latency p50/p99.
// Each run takes 8 s of wall time; run it once:
//
//	go test ./internal/region -run '^$' -bench Regions -benchtime 1x
//
// In shared mode every region decides on eu's Redis (us and ap across the
// proxy); in share and sync each on its own, sync publishing every 100 ms.
func BenchmarkRegions(b *testing.B) {
	for _, mode := range []region.Mode{region.Shared, region.Share, region.Sync} {
		for _, alg := range []enforce.Algorithm{enforce.FixedWindow, enforce.SlidingWindowCounter, enforce.TokenBucket} {
			b.Run(fmt.Sprintf("%s/%s", mode, alg), func(b *testing.B) {
				for range b.N {
					measureRegions(b, mode, limitFor(alg))
				}
			})
		}
	}
}

func measureRegions(b *testing.B, mode region.Mode, l enforce.Limit) {
	names := []string{"eu", "us", "ap"}
	weights := make([]region.Weight, len(names))
	servers := make([]*testenv.PrivateRedis, len(names))
	for i, n := range names {
		weights[i] = region.Weight{Name: n, Weight: 1}
		servers[i] = testenv.StartPrivateRedis(b)
	}
	client := func(addr string) redis.UniversalClient {
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true, PoolSize: 64})
		b.Cleanup(func() { c.Close() })
		return c
	}
	store := func(c redis.UniversalClient) *redisstore.Store {
		s, err := redisstore.New(c, redisstore.Options{Prefix: "sluice:", DisableUsage: true, Timeout: 2 * time.Second})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s
	}
	const interval = 100 * time.Millisecond
	stores := make([]*region.Store, len(names))
	for i, n := range names {
		addr := servers[i].Addr
		if mode == region.Shared && i > 0 {
			addr = startDelayProxy(b, servers[0].Addr, interRegionDelay).addr()
		}
		var peers []region.PeerStore
		if mode == region.Sync {
			for j, q := range names {
				if j == i {
					continue
				}
				pc := client(startDelayProxy(b, servers[j].Addr, interRegionDelay).addr())
				peers = append(peers, region.PeerStore{Name: q, Charger: store(pc), Ping: func(ctx context.Context) error { return pc.Ping(ctx).Err() }})
			}
		}
		s, err := region.New(store(client(addr)), region.Config{Region: n, Regions: weights, Mode: mode, Interval: interval}, peers, nil)
		if err != nil {
			b.Fatal(err)
		}
		stores[i] = s
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, s := range stores {
		wg.Add(1)
		go func() { defer wg.Done(); _ = s.Run(ctx) }()
	}

	// A request every 5 ms, round robin: 200/s against 100/s, each sent
	// without waiting for the one before (shared mode's 80 ms would
	// otherwise slow the client down).
	const windows = 8
	type result struct {
		region  int
		at      time.Time
		allowed bool
		took    time.Duration
	}
	results := make(chan result, 4096)
	rate := time.Second / time.Duration(2*l.Limit)
	start := time.Now()
	var sends sync.WaitGroup
	for n := 0; time.Since(start) < windows*l.Window; n++ {
		if d := time.Until(start.Add(time.Duration(n) * rate)); d > 0 {
			time.Sleep(d)
		}
		i := n % len(stores)
		sends.Add(1)
		go func() {
			defer sends.Done()
			t0 := time.Now()
			d, err := stores[i].Allow(ctx, enforce.Request{Subject: "key:client", Limits: []enforce.Limit{l}})
			took := time.Since(t0)
			if err != nil {
				b.Errorf("region %s: %v", names[i], err)
				return
			}
			results <- result{region: i, at: d.At, allowed: d.Allowed, took: took}
		}()
	}
	go func() { sends.Wait(); close(results) }()
	perWindow := map[int64]int64{}
	lat := make([][]time.Duration, len(stores))
	var first int64 = -1
	for r := range results {
		lat[r.region] = append(lat[r.region], r.took)
		if !r.allowed {
			continue
		}
		w := r.at.UnixMicro() / l.Window.Microseconds()
		perWindow[w]++
		if first < 0 || w < first {
			first = w
		}
	}
	cancel()
	wg.Wait()

	// The first and last windows are partial; the rest are whole. A
	// bucket spends its capacity in the first two, then admits its rate:
	// past those, every algorithm's window is measured against the limit.
	keys := make([]int64, 0, len(perWindow))
	for w := range perWindow {
		keys = append(keys, w)
	}
	slices.Sort(keys)
	skip := 1
	if isBucket(l.Algorithm) {
		skip = 2
	}
	worst := int64(-1 << 62)
	for n, w := range keys {
		if n < skip || n == len(keys)-1 {
			continue
		}
		worst = max(worst, perWindow[w]-l.Limit)
	}
	// Stated: sync lets each other region spend what the client sends it in
	// one interval plus the publication's trip before it is counted.
	lag := interval + 2*interRegionDelay
	stated := int64(0)
	if mode == region.Sync {
		stated = int64(len(stores)-1) * ((2*l.Limit*int64(lag)/int64(l.Window) + int64(len(stores)) - 1) / int64(len(stores)))
	}
	b.ReportMetric(float64(stated), "bound-over-limit")
	b.ReportMetric(float64(worst), "measured-over-limit")
	for i, ds := range lat {
		slices.Sort(ds)
		b.ReportMetric(ms(ds[len(ds)/2]), names[i]+"-p50-ms")
		b.ReportMetric(ms(ds[len(ds)*99/100]), names[i]+"-p99-ms")
	}
	b.Logf("%s %s: admitted per window %v", mode, l.Algorithm, perWindowList(keys, perWindow))
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func perWindowList(keys []int64, m map[int64]int64) []int64 {
	out := make([]int64, len(keys))
	for i, k := range keys {
		out[i] = m[k]
	}
	return out
}

// BenchmarkRegionOverhead is one decision through the region store, against
// the same decision on the RedisStore alone (the shared test Redis, one
// subject per goroutine): what share's scaling and sync's bookkeeping of
// the consumption to publish cost per request.
func BenchmarkRegionOverhead(b *testing.B) {
	client, prefix := testenv.Redis(b)
	rs, err := redisstore.New(client, redisstore.Options{Prefix: prefix, DisableUsage: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { rs.Close() })
	weights := []region.Weight{{Name: "eu", Weight: 1}, {Name: "us", Weight: 1}}
	l := enforce.Limit{Name: "plan", Algorithm: enforce.FixedWindow, Limit: 1 << 40, Window: time.Hour}
	stores := map[string]enforce.Store{"redis": rs}
	for _, mode := range []region.Mode{region.Share, region.Sync} {
		var peers []region.PeerStore
		if mode == region.Sync {
			// A peer that is never published to: the benchmark measures
			// the decision, not the rounds.
			peers = []region.PeerStore{{Name: "us", Charger: rs, Ping: func(context.Context) error { return nil }}}
		}
		s, err := region.New(rs, region.Config{Region: "eu", Regions: weights, Mode: mode}, peers, nil)
		if err != nil {
			b.Fatal(err)
		}
		stores[string(mode)] = s
	}
	for _, name := range []string{"redis", "share", "sync"} {
		store := stores[name]
		b.Run(name, func(b *testing.B) {
			var n atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				req := enforce.Request{Subject: fmt.Sprintf("key:%d", n.Add(1)), Limits: []enforce.Limit{l}}
				layers := make([]enforce.LayerResult, 1)
				into := store.(interface {
					AllowInto(context.Context, enforce.Request, []enforce.LayerResult) (enforce.Decision, error)
				})
				for pb.Next() {
					if _, err := into.AllowInto(context.Background(), req, layers); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
