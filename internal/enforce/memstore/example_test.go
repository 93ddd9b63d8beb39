package memstore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/enforce/storetest"
)

func TestMemoryStoreIsExactUnderConcurrency(t *testing.T) {
	const limit = 500
	for _, alg := range []enforce.Algorithm{enforce.FixedWindow, enforce.SlidingWindowLog, enforce.TokenBucket, enforce.LeakyBucket} {
		t.Run(string(alg), func(t *testing.T) {
			store := memstore.New(memstore.Options{Now: func() time.Time { return storetest.Epoch }})
			l := enforce.Limit{Name: "l", Algorithm: alg, Limit: limit, Window: time.Hour}
			if alg == enforce.LeakyBucket {
				l.Burst = limit - 1
			}
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for g := 0; g < 16; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < 100; i++ {
						d, err := store.Allow(context.Background(), enforce.Request{Subject: "key:shared", Limits: []enforce.Limit{l}})
						if err != nil {
							t.Error(err)
							return
						}
						if d.Allowed {
							admitted.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			if got := admitted.Load(); got != limit {
				t.Errorf("admitted %d of 1600, want exactly %d", got, limit)
			}
		})
	}
}

func Example() {
	// A fixed clock keeps the output stable; production leaves Now nil.
	store := memstore.New(memstore.Options{Now: func() time.Time { return time.Unix(1_800_000_000, 0) }})
	req := enforce.Request{
		Subject: "key:42",
		Route:   "GET /api/search",
		Limits: []enforce.Limit{
			{Name: "pro-global", Algorithm: enforce.SlidingWindowCounter, Limit: 10000, Window: time.Hour},
			{Name: "pro-search", Algorithm: enforce.TokenBucket, Limit: 2, Window: time.Second, Burst: 10},
		},
	}
	for i := 0; i < 11; i++ {
		d, _ := store.Allow(context.Background(), req)
		if !d.Allowed {
			b := d.Binding()
			fmt.Printf("request %d rejected by %s, retry after %s\n", i+1, b.Limit.Name, b.RetryAfter)
		}
	}
	// Output: request 11 rejected by pro-search, retry after 500ms
}
