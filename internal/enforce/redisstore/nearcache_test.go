package redisstore

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/storetest"
)

// TestNearCacheSparesRedisAFlood counts EVALSHA calls on a private
// redis-server (INFO commandstats): once a subject is over its limit, a
// flood of 1,000 requests from it over two instances costs one script call
// per instance (the rejection that each remembers) until the rejection's
// RetryAfter; just before then Redis would still reject (so the cache was
// exact), and the first request at that instant is decided by Redis again
// and admitted. Every algorithm, and requests of several layers.
func TestNearCacheSparesRedisAFlood(t *testing.T) {
	const w = 10 * time.Second
	cases := []struct {
		name   string
		limits []enforce.Limit
	}{
		{"FixedWindow", []enforce.Limit{{Name: "fw", Algorithm: enforce.FixedWindow, Limit: 3, Window: w}}},
		{"SlidingWindowLog", []enforce.Limit{{Name: "log", Algorithm: enforce.SlidingWindowLog, Limit: 3, Window: w}}},
		{"SlidingWindowCounter", []enforce.Limit{{Name: "swc", Algorithm: enforce.SlidingWindowCounter, Limit: 3, Window: w}}},
		{"TokenBucket", []enforce.Limit{{Name: "tb", Algorithm: enforce.TokenBucket, Limit: 3, Window: w}}},
		{"LeakyBucket", []enforce.Limit{{Name: "lb", Algorithm: enforce.LeakyBucket, Limit: 3, Window: w, Burst: 2, Mode: enforce.ModeReject}}},
		// One layer rejects, the other would admit.
		{"TwoLayersOneRejecting", []enforce.Limit{
			{Name: "global", Algorithm: enforce.FixedWindow, Limit: 100, Window: time.Minute},
			{Name: "tb", Algorithm: enforce.TokenBucket, Limit: 3, Window: w},
		}},
		// Both reject, with different waits: the longer one governs.
		{"TwoLayersBothRejecting", []enforce.Limit{
			{Name: "tb", Algorithm: enforce.TokenBucket, Limit: 3, Window: w},
			{Name: "fw", Algorithm: enforce.FixedWindow, Limit: 3, Window: w},
		}},
	}
	srv := startPrivateRedis(t)
	admin := srv.client()
	ctx := context.Background()
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clock := storetest.NewClock()
			prefix := fmt.Sprintf("near%d:", i)
			opts := Options{Prefix: prefix, Now: clock.Now, NegativeCacheSize: 100, DisableUsage: true}
			a := newTestRedisStore(t, srv.client(), opts)
			b := newTestRedisStore(t, srv.client(), opts)
			req := enforce.Request{Subject: "ip:203.0.113.9", Route: "GET /api/search", Limits: tc.limits}

			// Spend the budget on instance a until a rejection.
			var rejected enforce.Decision
			for admitted := 0; ; admitted++ {
				d, err := a.Allow(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				if !d.Allowed {
					rejected = d
					break
				}
				if admitted > 3 {
					t.Fatalf("admitted %d, over every limit", admitted+1)
				}
			}
			if d, err := b.Allow(ctx, req); err != nil || d.Allowed {
				t.Fatalf("instance b: %+v, %v; want rejected", d, err)
			}
			var wait time.Duration
			for _, l := range rejected.Layers {
				if !l.Allowed {
					wait = max(wait, l.RetryAfter)
				}
			}
			if wait <= 0 {
				t.Fatalf("rejection without a RetryAfter: %+v", rejected)
			}

			before := evalshaCalls(t, admin)
			flood(t, []*Store{a, b}, req, 1000)
			if got := evalshaCalls(t, admin) - before; got != 0 {
				t.Errorf("the flood of 1,000 cost %d script calls, want 0 beyond the two rejections remembered", got)
			}

			// Just before the wait is over, Redis itself still rejects
			// (Peek is never cached), and the cache still answers.
			clock.Set(storetest.Epoch.Add(wait - time.Microsecond))
			if d, err := a.Peek(ctx, req); err != nil || d.Allowed {
				t.Errorf("1 µs before RetryAfter, Redis says %+v, %v; the cached rejection outlived a possible admission", d, err)
			}
			before = evalshaCalls(t, admin)
			if d, err := a.Allow(ctx, req); err != nil || d.Allowed {
				t.Errorf("1 µs before RetryAfter: %+v, %v; want the cached rejection", d, err)
			}
			if got := evalshaCalls(t, admin) - before; got != 0 {
				t.Errorf("1 µs before RetryAfter: %d script calls, want 0", got)
			}

			// At RetryAfter the first request is Redis's, and admitted.
			clock.Set(storetest.Epoch.Add(wait))
			d, err := a.Allow(ctx, req)
			if err != nil || !d.Allowed {
				t.Errorf("at RetryAfter: %+v, %v; want admitted by Redis", d, err)
			}
			if got := evalshaCalls(t, admin) - before; got != 1 {
				t.Errorf("at RetryAfter: %d script calls, want 1", got)
			}
		})
	}
}

// flood sends n rejected-expected requests for req, spread over the stores
// from 32 goroutines each.
func flood(t *testing.T, stores []*Store, req enforce.Request, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	per := n / len(stores) / 32
	for _, s := range stores {
		for range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range per {
					d, err := s.Allow(context.Background(), req)
					if err == nil && d.Allowed {
						err = fmt.Errorf("admitted during the flood: %+v", d)
					}
					if err != nil {
						errs <- err
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
