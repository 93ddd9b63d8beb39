package redisstore

import (
	"context"
	"os/exec"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/storetest"
)

// instances returns two RedisStores on separate clients sharing one prefix,
// standing in for two portal instances; timeout 0 is the store's default.
func instances(t *testing.T, now func() time.Time, timeout time.Duration) []*Store {
	t.Helper()
	client, prefix := storetest.Redis(t)
	second := storetest.InstanceClient(t)
	var stores []*Store
	for _, c := range []redis.UniversalClient{client, second} {
		stores = append(stores, newTestRedisStore(t, c, Options{Prefix: prefix, Now: now, Timeout: timeout}))
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
func hammer(t *testing.T, stores []*Store, goroutinesPer int, attempts int64, limits []enforce.Limit) int64 {
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
					d, err := s.Allow(context.Background(), enforce.Request{Subject: "key:shared", Route: "GET /x", Limits: limits})
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
		limit enforce.Limit
	}{
		{"FixedWindow", enforce.Limit{Name: "l", Algorithm: enforce.FixedWindow, Limit: limit, Window: day}},
		{"SlidingWindowLog", enforce.Limit{Name: "l", Algorithm: enforce.SlidingWindowLog, Limit: limit, Window: day}},
		// Refill is one token per 432 s: none during the test.
		{"TokenBucket", enforce.Limit{Name: "l", Algorithm: enforce.TokenBucket, Limit: limit, Window: day}},
		// Burst+1 pass back to back in reject mode.
		{"LeakyBucket", enforce.Limit{Name: "l", Algorithm: enforce.LeakyBucket, Limit: limit, Window: day, Burst: limit - 1}},
		// Renews on the 1st at midnight UTC (no anchor), so the midnight
		// guard below covers it too.
		{"QuotaMonth", enforce.Limit{Name: "l", Algorithm: enforce.Quota, Period: enforce.PeriodMonth, Limit: limit}},
		{"QuotaDay", enforce.Limit{Name: "l", Algorithm: enforce.Quota, Period: enforce.PeriodDay, Limit: limit}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// These use Redis TIME, the production clock. A day-long window
			// ends at UTC midnight; do not straddle it.
			if untilMidnight := time.Until(time.Now().UTC().Truncate(day).Add(day)); untilMidnight < 10*time.Second {
				time.Sleep(untilMidnight + time.Second)
			}
			stores := instances(t, nil, timeout)
			if got := hammer(t, stores, 8, 3*limit, []enforce.Limit{tc.limit}); got != limit {
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
	clock := storetest.NewClock()
	stores := instances(t, clock.Now, 5*time.Second)
	limits := []enforce.Limit{{Name: "swc", Algorithm: enforce.SlidingWindowCounter, Limit: perWindow, Window: time.Second}}
	var admitted, attempts int64
	for at := time.Duration(0); at < windows*time.Second; at += tick {
		clock.Set(storetest.Epoch.Add(at))
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
