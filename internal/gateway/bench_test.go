package gateway_test

import (
	"context"
	"net/http"
	"slices"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/redisstore"
	"github.com/sluicehq/sluice/internal/gateway"
	"github.com/sluicehq/sluice/internal/snapshot"
	"github.com/sluicehq/sluice/internal/testenv"
)

// benchCallers is how many concurrent callers the gateway benchmarks run.
const benchCallers = 64

// benchLimit is the benchmarks' tier limit: the most a tier may allow, and
// more than any run reaches.
const benchLimit = 1_000_000_000_000

// benchFixture is the fixture on Redis counters with a limit no benchmark
// reaches, so every decision is an admission consumed in Redis.
func benchFixture(b *testing.B) *fixture {
	b.Helper()
	rdb, prefix := testenv.Redis(b)
	// A shared, loaded machine stalls Redis now and then past the default
	// 100 ms; the benchmark measures throughput, not the failure mode.
	store, err := redisstore.New(rdb, redisstore.Options{Prefix: prefix, Timeout: 5 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	f := newFixture(b, store)
	in := f.plan.Input()
	in.Limits[0].Limit = benchLimit
	if _, err := f.plans.Update(context.Background(), actor, f.plan.ID, f.plan.Version, in); err != nil {
		b.Fatal(err)
	}
	f.waitFor(b, func(*snapshot.Snapshot) bool {
		c, err := f.holder.ResolveKey(f.secret)
		return err == nil && slices.ContainsFunc(c.Limits, func(l enforce.Limit) bool { return l.Limit == benchLimit })
	})
	return f
}

// runCallers runs b.N calls of call over benchCallers goroutines and
// reports decisions per second and the p99 latency.
func runCallers(b *testing.B, call func() error) {
	b.Helper()
	var (
		mu        sync.Mutex
		latencies = make([]time.Duration, 0, b.N)
		next      = make(chan struct{}, b.N)
	)
	for range b.N {
		next <- struct{}{}
	}
	close(next)
	b.ResetTimer()
	start := time.Now()
	cpu0 := processCPU()
	var wg sync.WaitGroup
	for range benchCallers {
		wg.Go(func() {
			local := make([]time.Duration, 0, b.N/benchCallers+1)
			for range next {
				t0 := time.Now()
				if err := call(); err != nil {
					b.Error(err)
					return
				}
				local = append(local, time.Since(t0))
			}
			mu.Lock()
			latencies = append(latencies, local...)
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu := processCPU() - cpu0
	b.StopTimer()
	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	if len(latencies) > 0 {
		b.ReportMetric(float64(len(latencies))/elapsed.Seconds(), "decisions/s")
		b.ReportMetric(float64(latencies[len(latencies)*99/100].Microseconds()), "p99-µs")
		// Client and server share the process: the figure compares ways
		// in (and versions) under the same client, not absolute server cost.
		b.ReportMetric(float64(cpu.Microseconds())/float64(len(latencies)), "cpu-µs/decision")
	}
}

// processCPU is the user and system CPU time the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkCheck is GET /v1/check over HTTP/1.1 keep-alive connections, as
// a gateway asks it.
func BenchmarkCheck(b *testing.B) {
	f := benchFixture(b)
	srv := f.checkServer(b)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: benchCallers}}
	runCallers(b, func() error {
		req, _ := http.NewRequest("GET", srv.URL+gateway.CheckPath, nil)
		req.Header.Set("X-Forwarded-Method", "GET")
		req.Header.Set("X-Forwarded-Uri", "/items/42")
		req.Header.Set("X-API-Key", f.secret)
		res, err := client.Do(req)
		if err != nil {
			return err
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			return errStatus(res.StatusCode)
		}
		return nil
	})
}

// BenchmarkRateLimitService is ShouldRateLimit over one gRPC connection, as
// Envoy multiplexes its calls.
func BenchmarkRateLimitService(b *testing.B) {
	f := benchFixture(b)
	c := rlsClient(b, f)
	req := &rlsv3.RateLimitRequest{Domain: "shop", Descriptors: []*rlv3.RateLimitDescriptor{envoyDescriptor("GET", "/items/42", f.secret)}}
	runCallers(b, func() error {
		res, err := c.ShouldRateLimit(context.Background(), req)
		if err != nil {
			return err
		}
		if res.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			return errStatus(http.StatusTooManyRequests)
		}
		return nil
	})
}

type errStatus int

func (e errStatus) Error() string { return "status " + http.StatusText(int(e)) }
