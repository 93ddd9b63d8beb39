package storetest

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
)

// TestKeysOfOneDeveloperShareThePlanWideLimit: two keys of one subject
// share the limits that are not PerKey and keep their own PerKey ones, in
// both stores; a rejection by the shared layer consumes nothing from the
// key's own layer, and concurrent decisions of both keys admit exactly the
// shared limit.
func testKeysOfOneDeveloperShareThePlanWideLimit(t *testing.T, kinds []Kind) {
	shared := enforce.Limit{Name: "pro-global", Algorithm: enforce.FixedWindow, Limit: 10, Window: time.Hour}
	tier := enforce.Limit{Name: "pro-search", Algorithm: enforce.FixedWindow, Limit: 6, Window: time.Hour, Route: "GET /api/search", PerKey: true}
	limits := []enforce.Limit{shared, tier}
	for _, kind := range kinds {
		t.Run(kind.Name, func(t *testing.T) {
			t.Run("SharedLayerAcrossKeys", func(t *testing.T) {
				store := kind.New(t, NewClock())
				ctx := context.Background()
				admitted := map[string]int{}
				for i := range 20 {
					key := []string{"key:1", "key:2"}[i%2]
					d, err := store.Allow(ctx, enforce.Request{Subject: "dev:7", Key: key, Route: tier.Route, Limits: limits})
					if err != nil {
						t.Fatal(err)
					}
					if d.Allowed {
						admitted[key]++
					}
				}
				if admitted["key:1"] != 5 || admitted["key:2"] != 5 {
					t.Fatalf("admitted per key = %v, want 5 and 5: the plan-wide 10 is shared", admitted)
				}
				// Each key spent 5 of its own 6: the shared rejections took
				// nothing from the keys' tiers.
				for _, key := range []string{"key:1", "key:2"} {
					d, err := store.Peek(ctx, enforce.Request{Subject: "dev:7", Key: key, Route: tier.Route, Limits: limits})
					if err != nil {
						t.Fatal(err)
					}
					if d.Layers[0].Remaining != 0 || d.Layers[1].Remaining != 1 {
						t.Fatalf("%s remaining = %d shared, %d own; want 0 and 1", key, d.Layers[0].Remaining, d.Layers[1].Remaining)
					}
				}
			})
			t.Run("PerKeyLayerIsTheKeysOwn", func(t *testing.T) {
				store := kind.New(t, NewClock())
				ctx := context.Background()
				only := []enforce.Limit{tier}
				count := func(key string) int {
					n := 0
					for range 10 {
						d, err := store.Allow(ctx, enforce.Request{Subject: "dev:7", Key: key, Route: tier.Route, Limits: only})
						if err != nil {
							t.Fatal(err)
						}
						if d.Allowed {
							n++
						}
					}
					return n
				}
				if a, b := count("key:1"), count("key:2"); a != 6 || b != 6 {
					t.Fatalf("admitted = %d and %d, want 6 each: an endpoint tier counts per key", a, b)
				}
			})
			t.Run("ConcurrentKeysAdmitExactlyTheSharedLimit", func(t *testing.T) {
				store := kind.New(t, NewClock())
				big := []enforce.Limit{{Name: "pro-global", Algorithm: enforce.FixedWindow, Limit: 50, Window: time.Hour},
					{Name: "pro-search", Algorithm: enforce.TokenBucket, Limit: 1000, Window: time.Hour, PerKey: true}}
				var mu sync.Mutex
				var wg sync.WaitGroup
				admitted := 0
				for g := range 8 {
					wg.Go(func() {
						key := "key:" + string(rune('a'+g%4))
						for range 25 {
							d, err := store.Allow(context.Background(), enforce.Request{Subject: "dev:9", Key: key, Limits: big})
							if err != nil {
								t.Error(err)
								return
							}
							if d.Allowed {
								mu.Lock()
								admitted++
								mu.Unlock()
							}
						}
					})
				}
				wg.Wait()
				if admitted != 50 {
					t.Fatalf("admitted %d of 200 over 4 keys, want exactly the shared 50", admitted)
				}
			})
		})
	}
}

func testStoresRefuseABracedKey(t *testing.T, kinds []Kind) {
	l := []enforce.Limit{{Name: "g", Algorithm: enforce.FixedWindow, Limit: 5, Window: time.Minute, PerKey: true}}
	for _, kind := range kinds {
		t.Run(kind.Name, func(t *testing.T) {
			_, err := kind.New(t, NewClock()).Allow(context.Background(), enforce.Request{Subject: "dev:1", Key: "key:{1}", Limits: l})
			if err == nil || !strings.Contains(err.Error(), "brace") {
				t.Fatalf("Allow = %v, want an invalid-request error naming the brace", err)
			}
		})
	}
}
