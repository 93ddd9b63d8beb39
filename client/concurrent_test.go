package client_test

import (
	"context"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/client/internal/limitserver"
)

// TestSharedKeyUnderLimit runs 50 goroutines sharing one key against a server
// admitting 10 requests per second, once per strategy. Every call must end in
// a 200, and the server must never admit more than the limit in a window.
func TestSharedKeyUnderLimit(t *testing.T) {
	const goroutines, limit = 50, 10
	tests := []struct {
		name   string
		jitter client.Jitter
		pace   bool
	}{
		{"full jitter backoff", client.FullJitter, false},
		{"equal jitter backoff", client.EqualJitter, false},
		{"exponential backoff", client.NoJitter, false},
		{"proactive pacing", client.FullJitter, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := limitserver.New(limit, time.Second)
			ts := httptest.NewServer(srv)
			defer ts.Close()
			c := client.New(client.Config{
				Key:         "sk_test_shared",
				Jitter:      tt.jitter,
				Pace:        tt.pace,
				MaxAttempts: 20,
				BaseDelay:   50 * time.Millisecond,
				MaxDelay:    2 * time.Second,
				Rand:        lockedRand(1),
			})
			errs := callAll(t, c, ts.URL, goroutines)
			for _, err := range errs {
				t.Error(err)
			}
			st := srv.Stats()
			if st.Admitted != goroutines {
				t.Errorf("server admitted %d requests, want %d", st.Admitted, goroutines)
			}
			if st.MaxPerWindow > limit || st.Duplicates > 0 {
				t.Errorf("server admitted %d requests in one window (%d duplicate remainders), limit %d", st.MaxPerWindow, st.Duplicates, limit)
			}
			t.Logf("%s: %d admitted, %d rejected, at most %d per window",
				tt.name, st.Admitted, st.Rejected, st.MaxPerWindow)
		})
	}
}

// callerID keys the number of the goroutine callAll made a request in, so a
// Config.Sleep can tell the callers apart.
type callerID struct{}

func callAll(t *testing.T, c *client.Client, url string, n int) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for i := range n {
		wg.Go(func() {
			resp, err := c.Get(context.WithValue(ctx, callerID{}, i), url)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					err = &statusError{resp.StatusCode}
				}
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errs
}

type statusError struct{ code int }

func (e *statusError) Error() string { return "final status " + http.StatusText(e.code) }

// TestJitterSpreadsRetries measures how the first retries of 50 goroutines,
// all rejected by the same full window, are spread over time: with full
// jitter they are scheduled spread out, with plain exponential backoff in a
// herd. The spread is the standard deviation of the first retries' delays,
// and the herd the most of them within any 10 ms.
func TestJitterSpreadsRetries(t *testing.T) {
	t.Parallel()
	const goroutines, limit = 50, 10
	spread := map[client.Jitter]time.Duration{}
	herd := map[client.Jitter]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, j := range []client.Jitter{client.NoJitter, client.FullJitter, client.EqualJitter} {
		wg.Go(func() {
			srv := limitserver.New(limit, time.Second)
			ts := httptest.NewServer(srv)
			defer ts.Close()
			// Each caller's first retry, as the instant it is scheduled
			// for after the shared first burst: its delay from a common
			// zero. Measured at the server instead, the arrivals smear or
			// bunch as a loaded machine schedules the goroutines, which
			// once made full jitter's herd look no smaller than
			// exponential's; the delays are what the strategy chose.
			var firstMu sync.Mutex
			first := map[int]time.Time{}
			c := client.New(client.Config{
				Jitter:      j,
				MaxAttempts: 20,
				BaseDelay:   400 * time.Millisecond,
				MaxDelay:    4 * time.Second,
				Rand:        lockedRand(3),
				Sleep: func(ctx context.Context, d time.Duration) error {
					if id, ok := ctx.Value(callerID{}).(int); ok {
						firstMu.Lock()
						if _, seen := first[id]; !seen {
							first[id] = time.Unix(0, 0).Add(d)
						}
						firstMu.Unlock()
					}
					return sleep(ctx, d)
				},
			})
			for _, err := range callAll(t, c, ts.URL, goroutines) {
				t.Errorf("%s: %v", j, err)
			}
			firstMu.Lock()
			retries := make([]time.Time, 0, len(first))
			for _, at := range first {
				retries = append(retries, at)
			}
			firstMu.Unlock()
			// The first burst is rejected but for one window's limit, or
			// two when it straddles a window's end.
			if len(retries) < goroutines-2*limit {
				t.Errorf("%s: %d callers retried, want at least the %d a burst over two windows rejects", j, len(retries), goroutines-2*limit)
				return
			}
			arr := srv.Stats().Arrivals
			mu.Lock()
			spread[j] = stdDev(retries)
			herd[j] = maxIn(retries, 10*time.Millisecond)
			mu.Unlock()
			t.Logf("%-12s %d arrivals at the server", j, len(arr))
		})
	}
	wg.Wait()
	for _, j := range []client.Jitter{client.NoJitter, client.FullJitter, client.EqualJitter} {
		t.Logf("%-12s first retries: std dev %v, at most %d within 10ms", j, spread[j].Round(time.Millisecond), herd[j])
	}
	if spread[client.FullJitter] <= spread[client.NoJitter] {
		t.Errorf("full jitter spread %v is not wider than exponential %v", spread[client.FullJitter], spread[client.NoJitter])
	}
	if herd[client.FullJitter] >= herd[client.NoJitter] {
		t.Errorf("full jitter herd %d is not smaller than exponential %d", herd[client.FullJitter], herd[client.NoJitter])
	}
}

// sleep waits for d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func stdDev(ts []time.Time) time.Duration {
	var mean float64
	for _, x := range ts {
		mean += float64(x.UnixNano())
	}
	mean /= float64(len(ts))
	var sq float64
	for _, x := range ts {
		d := float64(x.UnixNano()) - mean
		sq += d * d
	}
	return time.Duration(math.Sqrt(sq / float64(len(ts))))
}

// maxIn is the most of ts falling within any interval of length w.
func maxIn(ts []time.Time, w time.Duration) int {
	sorted := append([]time.Time(nil), ts...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Before(sorted[j]) })
	best, lo := 0, 0
	for hi := range sorted {
		for sorted[hi].Sub(sorted[lo]) >= w {
			lo++
		}
		best = max(best, hi-lo+1)
	}
	return best
}

// lockedRand is a seeded source safe for the concurrent use Config.Rand needs.
func lockedRand(seed uint64) func() float64 {
	var mu sync.Mutex
	r := rand.New(rand.NewPCG(seed, seed+1))
	return func() float64 {
		mu.Lock()
		defer mu.Unlock()
		return r.Float64()
	}
}
