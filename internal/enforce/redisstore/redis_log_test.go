package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/enforce/storetest"
	"github.com/sluicehq/sluice/internal/testenv"
)

// TestRedisSlidingLogAgreesWithMemoryAcrossChunks drives the memory store
// and the Redis store with the same requests, hundreds live at once so the
// Redis log seals chunks and expires them whole and in part, with costs
// that take the long entry (above 255), Peeks, a second layer beside the
// log, and a clock that now and then steps back: every layer's Allowed,
// Remaining, ResetAfter and RetryAfter must be the same.
func TestRedisSlidingLogAgreesWithMemoryAcrossChunks(t *testing.T) {
	client, prefix := storetest.Redis(t)
	for seed := uint64(1); seed <= 4; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		log := enforce.Limit{Name: "log", Algorithm: enforce.SlidingWindowLog, Limit: int64(150 + rng.IntN(600)), Window: time.Second}
		bucket := enforce.Limit{Name: "tb", Algorithm: enforce.TokenBucket, Limit: 2000, Window: time.Second, Burst: 400}
		t.Run(fmt.Sprintf("Seed%d_Limit%d", seed, log.Limit), func(t *testing.T) {
			clock := storetest.NewClock()
			mem := memstore.New(memstore.Options{Now: clock.Now, DisableUsage: true})
			red := newTestRedisStore(t, client, Options{Prefix: fmt.Sprintf("%s%d:", prefix, seed), Now: clock.Now, Timeout: 2 * time.Second, DisableUsage: true})
			ctx := context.Background()
			now := storetest.Epoch
			var admitted, rejected, long int
			var times []time.Time
			for i := range 4000 {
				gap := time.Duration(rng.IntN(6000)) * time.Microsecond
				switch rng.IntN(100) {
				case 0:
					gap = -time.Duration(rng.IntN(3000)) * time.Microsecond
				case 1, 2:
					gap = 300 * time.Millisecond
				case 3, 4, 5, 6:
					gap = 0
				}
				now = now.Add(gap)
				if n := len(times); n > 0 && rng.IntN(12) == 0 {
					// exactly a window after an earlier request: the
					// boundary, (now-W, now]
					if t0 := times[rng.IntN(n)].Add(log.Window); !t0.Before(now) {
						now = t0
					}
				}
				times = append(times, now)
				if len(times) > 400 {
					times = times[1:]
				}
				clock.Set(now)
				l := log
				l.Cost = int64(1 + rng.IntN(3))
				if rng.IntN(40) == 0 {
					l.Cost = int64(200 + rng.IntN(200))
				}
				req := enforce.Request{Subject: "key:chunks", Limits: []enforce.Limit{l}}
				if rng.IntN(4) == 0 {
					req.Limits = append(req.Limits, bucket)
				}
				peek := rng.IntN(8) == 0
				decide := func(s enforce.Store) (enforce.Decision, error) {
					if peek {
						return s.Peek(ctx, req)
					}
					return s.Allow(ctx, req)
				}
				want, err := decide(mem)
				if err != nil {
					t.Fatal(err)
				}
				got, err := decide(red)
				if err != nil {
					t.Fatal(err)
				}
				if got.Allowed != want.Allowed || len(got.Layers) != len(want.Layers) {
					t.Fatalf("request %d (peek %v, cost %d at +%s): Redis Allowed=%v, memory %v", i, peek, l.Cost, now.Sub(storetest.Epoch), got.Allowed, want.Allowed)
				}
				for j := range want.Layers {
					g, w := got.Layers[j], want.Layers[j]
					if g.Allowed != w.Allowed || g.Remaining != w.Remaining || g.ResetAfter != w.ResetAfter || g.RetryAfter != w.RetryAfter {
						t.Fatalf("request %d (peek %v, cost %d at +%s), layer %s: Redis %v %d %s %s, memory %v %d %s %s", i, peek, l.Cost, now.Sub(storetest.Epoch), w.Limit.Name,
							g.Allowed, g.Remaining, g.ResetAfter, g.RetryAfter, w.Allowed, w.Remaining, w.ResetAfter, w.RetryAfter)
					}
				}
				switch {
				case peek:
				case want.Allowed:
					admitted++
					if l.Cost > 255 {
						long++
					}
				default:
					rejected++
				}
			}
			sealed, err := client.HLen(ctx, fmt.Sprintf("%s%d:{key:chunks}:log:log", prefix, seed)).Result()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d admitted (%d of cost above 255), %d rejected; the log holds %d fields now", admitted, long, rejected, sealed)
			if admitted == 0 || rejected == 0 || long == 0 {
				t.Fatalf("%d admitted, %d of them long, %d rejected: the sequence did not exercise every case", admitted, long, rejected)
			}
		})
	}
}

// TestSlidingLogMemory logs 10,000 requests a minute on one subject for a
// minute and a half (arrivals 6 ms apart, each admitted at exactly the
// limit) and reads the log's MEMORY USAGE: at most 16 bytes per logged
// request (9 on Redis 7.0, jemalloc, against 137 for the sorted set it
// replaced), with the log trimmed as the window slides.
func TestSlidingLogMemory(t *testing.T) {
	testenv.RealRedis(t, "MEMORY USAGE")
	client, prefix := storetest.Redis(t)
	clock := storetest.NewClock()
	store := newTestRedisStore(t, client, Options{Prefix: prefix, Now: clock.Now, Timeout: 5 * time.Second, DisableUsage: true})
	ctx := context.Background()
	limit := enforce.Limit{Name: "log", Algorithm: enforce.SlidingWindowLog, Limit: 10_000, Window: time.Minute}
	req := enforce.Request{Subject: "key:mem", Limits: []enforce.Limit{limit}}
	key := prefix + "{key:mem}:log:log"
	const gap = 6 * time.Millisecond
	now := storetest.Epoch
	var most float64
	for i := range 15_000 {
		now = now.Add(gap)
		clock.Set(now)
		d, err := store.Allow(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			t.Fatalf("request %d, the window's %dth: rejected, want admitted (10,000 a minute)", i, min(i+1, 10_000))
		}
		if i >= 9_999 && i%250 == 0 {
			// A full window from here on: 10,000 requests logged.
			bytes, err := client.MemoryUsage(ctx, key, 0).Result()
			if err != nil {
				t.Fatal(err)
			}
			most = max(most, float64(bytes)/10_000)
			// The request past the limit, at the same instant.
			if d, err := store.Allow(ctx, req); err != nil || d.Allowed {
				t.Fatalf("request %d: the 10,001st of the window: Allowed=%v, %v; want rejected", i, d.Allowed, err)
			}
		}
	}
	t.Logf("the log takes at most %.1f bytes of Redis per logged request at 10,000 a minute", most)
	if most > 16 {
		t.Errorf("%.1f bytes per logged request, want at most 16", most)
	}
}
