package enforce

import (
	"context"
	"fmt"
	"os/exec"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// instances returns two RedisStores on separate clients sharing one prefix,
// standing in for two portal instances; timeout 0 is the store's default.
func instances(t *testing.T, now func() time.Time, timeout time.Duration) []*RedisStore {
	t.Helper()
	client, prefix := newTestRedis(t)
	second := newInstanceClient(t)
	var stores []*RedisStore
	for _, c := range []redis.UniversalClient{client, second} {
		stores = append(stores, newTestRedisStore(t, c, RedisOptions{Prefix: prefix, Now: now, Timeout: timeout}))
	}
	return stores
}

// burnCPU runs one busy-looping process per core until the test ends, so
// the test runs on a starved host.
func burnCPU(t *testing.T) {
	t.Helper()
	for range runtime.NumCPU() {
		cmd := exec.Command("sh", "-c", "while :; do :; done")
		if err := cmd.Start(); err != nil {
			t.Fatalf("start a CPU burner: %v", err)
		}
		t.Cleanup(func() {
			cmd.Process.Kill()
			cmd.Wait()
		})
	}
}

// hammer sends attempts decisions for one subject from goroutinesPer
// goroutines on each store and returns how many were admitted.
func hammer(t *testing.T, stores []*RedisStore, goroutinesPer int, attempts int64, limits []Limit) int64 {
	t.Helper()
	var next, admitted atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, len(stores)*goroutinesPer)
	for _, s := range stores {
		for range goroutinesPer {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for next.Add(1) <= attempts {
					d, err := s.Allow(context.Background(), Request{Subject: "key:shared", Route: "GET /x", Limits: limits})
					if err != nil {
						errs <- err
						return
					}
					if d.Allowed {
						admitted.Add(1)
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
	return admitted.Load()
}

func TestRedisStoreIsExactAcrossInstances(t *testing.T) {
	testRedisStoreIsExactAcrossInstances(t, 5*time.Second)
}

// TestRedisStoreIsExactAcrossInstancesOnAStarvedHost is the same with the
// default timeout while a CPU-burning process per core competes with the
// test, its Redis clients and Redis: every decision is still Redis's, within
// the timeout, and exact algorithms admit exactly the limit. A decision
// that timed out fails the test.
func TestRedisStoreIsExactAcrossInstancesOnAStarvedHost(t *testing.T) {
	burnCPU(t)
	testRedisStoreIsExactAcrossInstances(t, 0)
}

func testRedisStoreIsExactAcrossInstances(t *testing.T, timeout time.Duration) {
	const limit = 200
	day := 24 * time.Hour
	cases := []struct {
		name  string
		limit Limit
	}{
		{"FixedWindow", Limit{Name: "l", Algorithm: FixedWindow, Limit: limit, Window: day}},
		{"SlidingWindowLog", Limit{Name: "l", Algorithm: SlidingWindowLog, Limit: limit, Window: day}},
		// Refill is one token per 432 s: none during the test.
		{"TokenBucket", Limit{Name: "l", Algorithm: TokenBucket, Limit: limit, Window: day}},
		// Burst+1 pass back to back in reject mode.
		{"LeakyBucket", Limit{Name: "l", Algorithm: LeakyBucket, Limit: limit, Window: day, Burst: limit - 1}},
		// Renews on the 1st at midnight UTC (no anchor), so the midnight
		// guard below covers it too.
		{"QuotaMonth", Limit{Name: "l", Algorithm: Quota, Period: PeriodMonth, Limit: limit}},
		{"QuotaDay", Limit{Name: "l", Algorithm: Quota, Period: PeriodDay, Limit: limit}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// These use Redis TIME, the production clock. A day-long window
			// ends at UTC midnight; do not straddle it.
			if untilMidnight := time.Until(time.Now().UTC().Truncate(day).Add(day)); untilMidnight < 10*time.Second {
				time.Sleep(untilMidnight + time.Second)
			}
			stores := instances(t, nil, timeout)
			if got := hammer(t, stores, 8, 3*limit, []Limit{tc.limit}); got != limit {
				t.Errorf("admitted %d of %d attempts, want exactly %d", got, 3*limit, limit)
			}
		})
	}
}

func TestRedisSlidingCounterStaysWithinOnePercentOnUniformTraffic(t *testing.T) {
	// Uniform traffic at twice the limit from two instances: every 5 ms of
	// a controlled clock, 4 goroutines (2 per instance) decide at once, for
	// ten 1 s windows. Requests of one tick share one instant, so the order
	// in which the racing goroutines reach Redis cannot matter, and an exact
	// sliding window admits the limit per window. The counter's estimate
	// loses about tick/window per window (it cannot see the last tick's
	// share), 0.5 % here.
	const (
		perWindow  = 400
		windows    = 10
		tick       = 5 * time.Millisecond
		goroutines = 2
	)
	clock := newFakeClock()
	stores := instances(t, clock.Now, 5*time.Second)
	limits := []Limit{{Name: "swc", Algorithm: SlidingWindowCounter, Limit: perWindow, Window: time.Second}}
	var admitted, attempts int64
	for at := time.Duration(0); at < windows*time.Second; at += tick {
		clock.Set(epoch.Add(at))
		got := hammer(t, stores, goroutines, 2*goroutines, limits)
		admitted += got
		attempts += 2 * goroutines
	}
	want := int64(perWindow * windows)
	t.Logf("admitted %d of %d, ideal %d", admitted, attempts, want)
	if diff := admitted - want; diff < -want/100 || diff > want/100 {
		t.Errorf("admitted %d over %d windows, want %d within 1%%", admitted, windows, want)
	}
}

func TestMemoryStoreIsExactUnderConcurrency(t *testing.T) {
	const limit = 500
	for _, alg := range []Algorithm{FixedWindow, SlidingWindowLog, TokenBucket, LeakyBucket} {
		t.Run(string(alg), func(t *testing.T) {
			store := NewMemoryStore(MemoryOptions{Now: func() time.Time { return epoch }})
			l := Limit{Name: "l", Algorithm: alg, Limit: limit, Window: time.Hour}
			if alg == LeakyBucket {
				l.Burst = limit - 1
			}
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for g := 0; g < 16; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < 100; i++ {
						d, err := store.Allow(context.Background(), Request{Subject: "key:shared", Limits: []Limit{l}})
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

func ExampleMemoryStore() {
	// A fixed clock keeps the output stable; production leaves Now nil.
	store := NewMemoryStore(MemoryOptions{Now: func() time.Time { return time.Unix(1_800_000_000, 0) }})
	req := Request{
		Subject: "key:42",
		Route:   "GET /api/search",
		Limits: []Limit{
			{Name: "pro-global", Algorithm: SlidingWindowCounter, Limit: 10000, Window: time.Hour},
			{Name: "pro-search", Algorithm: TokenBucket, Limit: 2, Window: time.Second, Burst: 10},
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
