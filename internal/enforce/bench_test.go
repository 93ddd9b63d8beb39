package enforce

// Benchmarks of the stores beside the libraries they replace. Figures are in
// the comment at the end of this file; none of them is asserted.
//
//	go test -run '^$' -bench 'Memory|XTimeRate' -benchtime 2s -count 3 ./internal/enforce
//	go test -run '^$' -bench 'Redis' -benchtime 100000x -count 3 ./internal/enforce

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"
)

const benchKeys = 100_000

func benchSubjects() []string {
	subjects := make([]string, benchKeys)
	for i := range subjects {
		subjects[i] = "key:" + strconv.Itoa(i)
	}
	return subjects
}

// benchLimit always admits (its burst is never spent), so every store takes
// its full admitting path. fillBucket spends a billion tokens first, so its
// state outlives the benchmark and the 100,000-key runs measure live
// subjects, not idle ones evicted and recreated.
var benchLimit = Limit{Name: "tb", Algorithm: TokenBucket, Limit: 1e6, Window: time.Hour, Burst: 1e12}

func fillBucket(store *MemoryStore, subject string) {
	l := benchLimit
	l.Cost = 1e9
	store.Allow(context.Background(), Request{Subject: subject, Route: "GET /x", Limits: []Limit{l}})
}

func BenchmarkMemoryStore(b *testing.B) {
	subjects := benchSubjects()
	for _, cfg := range []struct {
		name string
		opts MemoryOptions
	}{
		{"Usage", MemoryOptions{}},
		{"NoUsage", MemoryOptions{DisableUsage: true}},
	} {
		b.Run(cfg.name+"/HotKey/Serial", func(b *testing.B) {
			store := NewMemoryStore(cfg.opts)
			fillBucket(store, "key:hot")
			req := Request{Subject: "key:hot", Route: "GET /x", Limits: []Limit{benchLimit}}
			layers := make([]LayerResult, 0, 1)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				store.AllowInto(ctx, req, layers)
			}
		})
		b.Run(cfg.name+"/HotKey/Parallel", func(b *testing.B) {
			store := NewMemoryStore(cfg.opts)
			fillBucket(store, "key:hot")
			req := Request{Subject: "key:hot", Route: "GET /x", Limits: []Limit{benchLimit}}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				layers := make([]LayerResult, 0, 1)
				for pb.Next() {
					store.AllowInto(ctx, req, layers)
				}
			})
		})
		b.Run(cfg.name+"/100kKeys/Serial", func(b *testing.B) {
			store := NewMemoryStore(cfg.opts)
			req := Request{Route: "GET /x", Limits: []Limit{benchLimit}}
			layers := make([]LayerResult, 0, 1)
			ctx := context.Background()
			for _, s := range subjects {
				fillBucket(store, s)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				req.Subject = subjects[i%benchKeys]
				store.AllowInto(ctx, req, layers)
				i++
			}
		})
		b.Run(cfg.name+"/100kKeys/Parallel", func(b *testing.B) {
			store := NewMemoryStore(cfg.opts)
			ctx := context.Background()
			for _, s := range subjects {
				fillBucket(store, s)
			}
			var seed atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				req := Request{Route: "GET /x", Limits: []Limit{benchLimit}}
				layers := make([]LayerResult, 0, 1)
				i := int(seed.Add(7919))
				for pb.Next() {
					req.Subject = subjects[i%benchKeys]
					store.AllowInto(ctx, req, layers)
					i++
				}
			})
		})
	}
	b.Run("Allow/HotKey/Serial", func(b *testing.B) {
		// Allow returns a fresh Layers slice: the one allocation AllowInto
		// saves.
		store := NewMemoryStore(MemoryOptions{})
		fillBucket(store, "key:hot")
		req := Request{Subject: "key:hot", Route: "GET /x", Limits: []Limit{benchLimit}}
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			store.Allow(ctx, req)
		}
	})
}

// BenchmarkXTimeRate is the baseline: golang.org/x/time/rate, one limiter
// for the hot key and a map of 100,000 limiters (pre-filled and read without
// a lock, which favours it: a real server must also insert and evict).
func BenchmarkXTimeRate(b *testing.B) {
	subjects := benchSubjects()
	newLimiter := func() *rate.Limiter { return rate.NewLimiter(rate.Limit(1e12), 1e12) }
	b.Run("HotKey/Serial", func(b *testing.B) {
		l := newLimiter()
		b.ReportAllocs()
		for b.Loop() {
			l.Allow()
		}
	})
	b.Run("HotKey/Parallel", func(b *testing.B) {
		l := newLimiter()
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				l.Allow()
			}
		})
	})
	limiters := make(map[string]*rate.Limiter, benchKeys)
	for _, s := range subjects {
		limiters[s] = newLimiter()
	}
	b.Run("100kKeys/Serial", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			limiters[subjects[i%benchKeys]].Allow()
			i++
		}
	})
	b.Run("100kKeys/Parallel", func(b *testing.B) {
		var seed atomic.Int64
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			i := int(seed.Add(7919))
			for pb.Next() {
				limiters[subjects[i%benchKeys]].Allow()
				i++
			}
		})
	})
}

// callers is the number of concurrent callers of the Redis benchmarks.
const callers = 64

// runCallers runs b.N decisions from 64 goroutines and reports decisions/s
// and latency percentiles.
func runCallers(b *testing.B, decide func(ctx context.Context, i int) error) {
	ctx := context.Background()
	lat := make([][]time.Duration, callers)
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Int64
	b.ResetTimer()
	start := time.Now()
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := make([]time.Duration, 0, b.N/callers+1)
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					break
				}
				t0 := time.Now()
				if err := decide(ctx, int(i)); err != nil {
					failed.Add(1)
				}
				mine = append(mine, time.Since(t0))
			}
			lat[g] = mine
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d of %d decisions failed", n, b.N)
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	pct := func(p float64) float64 { return float64(all[int(p*float64(len(all)-1))].Microseconds()) }
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
	b.ReportMetric(0, "ns/op")
}

func benchRedisClient(b *testing.B) (*redis.Client, string) {
	client, prefix := newTestRedis(b)
	c, ok := client.(*redis.Client)
	if !ok {
		b.Fatalf("benchmarks need a plain Redis client, got %T", client)
	}
	c.Options().PoolSize = callers
	return c, prefix
}

// BenchmarkRedisStore: 64 callers deciding one layer each on 1,000 subjects.
func BenchmarkRedisStore(b *testing.B) {
	for _, layers := range []int{1, 3} {
		b.Run(fmt.Sprintf("%dLayers", layers), func(b *testing.B) {
			client, prefix := benchRedisClient(b)
			store := newTestRedisStore(b, client, RedisOptions{Prefix: prefix, Timeout: time.Second})
			limits := []Limit{benchLimit,
				{Name: "fw", Algorithm: FixedWindow, Limit: 1e12, Window: time.Minute},
				{Name: "swc", Algorithm: SlidingWindowCounter, Limit: 1e12, Window: time.Minute}}[:layers]
			runCallers(b, func(ctx context.Context, i int) error {
				d, err := store.Allow(ctx, Request{Subject: "key:" + strconv.Itoa(i%1000), Route: "GET /x", Limits: limits})
				if err == nil && !d.Allowed {
					err = fmt.Errorf("rejected")
				}
				return err
			})
		})
	}
}

// BenchmarkRedisRate is go-redis/redis_rate/v10 with the same 64 callers
// and subjects: one script call per decision, no pipelining.
func BenchmarkRedisRate(b *testing.B) {
	client, prefix := benchRedisClient(b)
	limiter := redis_rate.NewLimiter(client)
	limit := redis_rate.Limit{Rate: 1e9, Burst: 1e9, Period: time.Second}
	runCallers(b, func(ctx context.Context, i int) error {
		res, err := limiter.Allow(ctx, prefix+"{key:"+strconv.Itoa(i%1000)+"}", limit)
		if err == nil && res.Allowed == 0 {
			err = fmt.Errorf("rejected")
		}
		return err
	})
}

var rpsLine = regexp.MustCompile(`([0-9.]+) requests per second`)

// BenchmarkRedisBenchmarkTool runs redis-benchmark with 64 clients, 16
// commands pipelined per client, on the store's own EVALSHA call for one
// subject and one layer: the ceiling a pipelining client could reach.
func BenchmarkRedisBenchmarkTool(b *testing.B) {
	path, err := exec.LookPath("redis-benchmark")
	if err != nil {
		b.Fatalf("redis-benchmark is needed: %v", err)
	}
	client, prefix := benchRedisClient(b)
	store := newTestRedisStore(b, client, RedisOptions{Prefix: prefix, Timeout: time.Second})
	call, err := store.prepare(Request{Subject: "key:1", Route: "GET /x", Limits: []Limit{benchLimit}}, true)
	if err != nil {
		b.Fatal(err)
	}
	opts := client.Options()
	host, port, _ := strings.Cut(opts.Addr, ":")
	args := []string{"-h", host, "-p", port, "-n", strconv.Itoa(max(b.N, 1000)), "-c", strconv.Itoa(callers), "-P", "16", "-q",
		"EVALSHA", store.ScriptSHA(), strconv.Itoa(len(call.keys))}
	args = append(args, call.keys...)
	for _, a := range call.args {
		args = append(args, fmt.Sprint(a))
	}
	b.ResetTimer()
	out, err := exec.Command(path, args...).CombinedOutput()
	b.StopTimer()
	if err != nil {
		b.Fatalf("redis-benchmark: %v: %s", err, out)
	}
	m := rpsLine.FindSubmatch(out)
	if m == nil {
		b.Fatalf("redis-benchmark printed no rate: %s", out)
	}
	rps, _ := strconv.ParseFloat(string(m[1]), 64)
	b.ReportMetric(rps, "decisions/s")
	b.ReportMetric(0, "ns/op")
}
