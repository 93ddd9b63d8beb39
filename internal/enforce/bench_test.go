package enforce

// Benchmarks of the stores beside the libraries they replace; no figure is
// asserted anywhere.
//
//	go test -run '^$' -bench 'MemoryInterleaved' -benchtime 10x -count 3 ./internal/enforce
//	go test -run '^$' -bench 'RedisInterleaved' -benchtime 8x -count 3 ./internal/enforce
//	go test -run '^$' -bench 'MemoryStore|XTimeRate' -benchtime 1s -count 3 ./internal/enforce
//	go test -run '^$' -bench 'RedisStore|RedisRate|RedisBenchmarkTool' -benchtime 100000x -count 3 ./internal/enforce
//
// (TEST_REDIS_URL=redis://127.0.0.1:<port>/0 points them at a private
// redis-server; wrap a run in /proc/<redis pid>/stat readings for Redis's
// CPU per decision.)
//
// Figures of 2026-11-30, one session on the 2-core shared build machine
// (Intel Xeon, Go 1.26, Redis 7.0.15 on loopback) while other engineers
// compiled and tested: load average 8 to 30, so absolute figures swing 2-4x
// between runs. The interleaved benchmarks alternate the contenders round by
// round and report medians, which is why their ratios are the figures to
// quote; ranges are over three runs.
//
// Memory store, one token-bucket layer, AllowInto with usage off (0 allocs/op
// for every algorithm, asserted by TestMemoryStoreAllowIntoAllocatesNothing):
// the first figures of that day (load 8 to 30) were 2.19 - 2.33x x/time/rate
// for a hot key and 1.63 - 1.95x for 100k keys, serially. After the hot-path
// work of the same day (validate a limit slice once, hash a subject once, one
// clock read outside the lock, results written through pointers) they are
// 1.13 - 1.45x and 1.11 - 1.28x: see memory_bench_test.go for the table,
// serial and parallel, and the command.
//
// Redis store, 64 concurrent callers, 2026-11-30 08:23-08:27 UTC after the
// script rewrite (one hash per subject, usage tallied in Go, coalesced calls
// of one subject, leaner Lua), "before" being commit 4438194 in the same
// session, on a private redis-server, load average 1 to 4. "Redis CPU" is
// redis-server's utime+stime from /proc per decision, networking included;
// usec/call is INFO commandstats' figure for EVALSHA (wall time inside the
// script, inflated when the client preempts Redis on 2 cores):
//
//	                               dec/s    p50      p99     usec/call  Redis CPU/dec  client CPU/dec
//	before, 1 layer, 1k subjects    38.9k  1.6 ms   3.6 ms   20.5       23.6 us        10.8 us
//	after,  1 layer, 1k subjects    60.1k  1.0 ms   3.2 ms   13.1       15.2 us         8.5 us
//	before, 3 layers                20.3k  3.1 ms   8.4 ms   42.3       46.7 us        15.3 us
//	after,  3 layers                29.1k  2.2 ms   5.7 ms   29.2       32.3 us        12.8 us
//	after,  1 layer, one subject   134.5k  0.41 ms  1.5 ms   ~19 coalesced per call   5.3 us  6.4 us
//	go-redis/redis_rate/v10         45.5k - 47.3k, p99 4.5 - 5.2 ms, 9.2 - 9.5 us/call, 17.5 - 17.7 us, 18 - 22 us
//
// BenchmarkRedisInterleaved -benchtime 5x (medians of rounds): store/redis_rate
// 0.88 before, 1.46 after; store (usage off)/redis-benchmark -P 16 0.79
// before, 0.77 after (redis-benchmark itself rose from 51k to 65k with the
// cheaper script); store p99 3.2 -> 2.7 ms.
//
// The script alone, redis-benchmark -c 16 -P 16 over 1,000 subjects
// (-r 1000), usage off in both, min of 5 runs: one token bucket 11.6 -> 8.5
// us/call, three layers 26.1 -> 21.6; the old script also spent 2 - 3 us on
// its usage HINCRBY, which the store now tallies in memory. This Redis's Lua
// costs 10 - 15 ns per VM instruction, about 100 ns per C function call,
// table or closure and 0.6 - 1.5 us per redis.call, so what is left is
// mostly the fixed EVALSHA price (0.8 us plus 0.1 us per argument), TIME,
// HMGET and HSET.
//
// Targets: 70 % of redis-benchmark's pipelined figure is met (0.77 - 1.0 in
// the runs of this session); 2x redis_rate is met for a hot subject (134k/s,
// coalesced, 2.8x) but not for 1,000 subjects (1.3 - 1.5x: the two cores are
// shared by Redis and the client, and Redis CPU per decision is still near
// redis_rate's); p99 under 2 ms is met for the hot subject (1.5 ms), not for
// 1,000 subjects (2.7 - 3.2 ms), where 64 callers in a closed loop wait 64 /
// throughput, 1.1 ms, on average.
//
// End to end (scripts/bench-e2e.sh, RUNS=3, wrk -t2 -c64 -d10s on
// /api/items/42, one anonymous subject, two layers), two sessions after:
// sluice 37 - 45 % of bare (23.7k - 27.4k req/s against 60.6k - 63.6k),
// redis_rate 33 - 34 %, memory 74 - 86 %; behind the FailoverStore 41 %.
// Before (same machine, interleaved single runs): 24 - 35 % (14.1k - 14.4k).
// Redis CPU per request fell from 26 - 28 us to 10 us (about 10 requests per
// script call); the server's own CPU is now the limit, 36 - 40 us per
// request against bare's 17 - 23 us, most of it net/http, the middleware and
// go-redis. The 60 % target is not met.
// Next session (a limit's field and boxed arguments cached per store:
// BenchmarkRedisStore allocs/op 19 -> 14 with one layer, 31 -> 18 with
// three), under load averages of 1.2 - 7.6 from other work on the machine:
// before, sluice 46 % (25.3k against 55.1k; runs 22.3k - 31.9k), redis_rate
// 40 %; after, sluice 45 % (17.4k against 39.0k; runs 15.9k - 29.5k, 68
// non-2xx answers while the load was 7.6; the script keeps no server log),
// redis_rate 49 %, memory 124 % (spread 66 %). Old and new benchservers
// interleaved (3 x 6 s each, load 4.6): 33.1k - 33.6k against 31.1k - 33.9k,
// no difference beyond noise. A CPU profile of the sluice server puts the
// Redis path (decide plus the pipeline worker) at 18 % of its CPU, about
// 6 us per request; net/http takes most of the rest, so the Redis path
// alone cannot reach 60 %. With the queue's one-channel send added (load
// 4.5 - 8.8): sluice 55 % (25.6k against 46.2k; runs 17.1k - 25.8k, 23
// non-2xx in one run), redis_rate 34 %; bare fell 52.7k -> 35.7k over the
// runs as the load rose, so the ratio flatters. Those non-2xx answers, seen
// only under load spikes, did not recur in four separate 8 - 10 s runs of
// the final code with the server's log kept (no failed decision logged). The 60 % target is not
// shown to be met.
//
// Round trips: TestRedisStoreOneScriptCallPerDecision asserts on a private
// redis-server that INFO commandstats counts exactly one EVALSHA per
// decision for 1, 3 and 5 layers, with 200 concurrent decisions batched on
// distinct subjects; concurrent Allow calls of one subject may share one
// (TestCoalescedScriptCallDecidesAsCallsInARow).

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

// BenchmarkMemoryInterleaved alternates rounds of 200,000 serial decisions
// of the memory store (AllowInto, usage off) and of x/time/rate, hot key and
// 100,000 keys, one round of each per b.N, and reports the median of each
// round's ratio, so a shared machine's load hits both alike. Run it with
// -benchtime 10x.
func BenchmarkMemoryInterleaved(b *testing.B) {
	const per = 200_000
	subjects := benchSubjects()
	store := NewMemoryStore(MemoryOptions{DisableUsage: true})
	for _, s := range append(subjects, "key:hot") {
		fillBucket(store, s)
	}
	hot := rate.NewLimiter(rate.Limit(1e12), 1e12)
	limiters := make(map[string]*rate.Limiter, benchKeys)
	for _, s := range subjects {
		limiters[s] = rate.NewLimiter(rate.Limit(1e12), 1e12)
	}
	ctx := context.Background()
	layers := make([]LayerResult, 0, 1)
	req := Request{Route: "GET /x", Limits: []Limit{benchLimit}}
	timeIt := func(f func(i int)) float64 {
		start := time.Now()
		for i := range per {
			f(i)
		}
		return float64(time.Since(start).Nanoseconds()) / per
	}
	var hotStore, hotRate, hotRatio, manyStore, manyRate, manyRatio []float64
	b.ResetTimer()
	for range b.N {
		req.Subject = "key:hot"
		s := timeIt(func(int) { store.AllowInto(ctx, req, layers) })
		r := timeIt(func(int) { hot.Allow() })
		hotStore, hotRate, hotRatio = append(hotStore, s), append(hotRate, r), append(hotRatio, s/r)
		s = timeIt(func(i int) {
			req.Subject = subjects[i%benchKeys]
			store.AllowInto(ctx, req, layers)
		})
		r = timeIt(func(i int) { limiters[subjects[i%benchKeys]].Allow() })
		manyStore, manyRate, manyRatio = append(manyStore, s), append(manyRate, r), append(manyRatio, s/r)
	}
	b.StopTimer()
	median := func(v []float64) float64 { slices.Sort(v); return v[len(v)/2] }
	b.ReportMetric(median(hotStore), "hot-store-ns")
	b.ReportMetric(median(hotRate), "hot-xrate-ns")
	b.ReportMetric(median(hotRatio), "hot-store/xrate")
	b.ReportMetric(median(manyStore), "100k-store-ns")
	b.ReportMetric(median(manyRate), "100k-xrate-ns")
	b.ReportMetric(median(manyRatio), "100k-store/xrate")
	b.ReportMetric(0, "ns/op")
}

// callers is the number of concurrent callers of the Redis benchmarks.
const callers = 64

// measureCallers runs n decisions from 64 goroutines and returns the
// decisions per second and every decision's latency, sorted.
func measureCallers(n int, decide func(ctx context.Context, i int) error) (float64, []time.Duration, error) {
	ctx := context.Background()
	lat := make([][]time.Duration, callers)
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Int64
	start := time.Now()
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := make([]time.Duration, 0, n/callers+1)
			for {
				i := next.Add(1)
				if i > int64(n) {
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
	if f := failed.Load(); f > 0 {
		return 0, nil, fmt.Errorf("%d of %d decisions failed", f, n)
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	return float64(n) / elapsed.Seconds(), all, nil
}

func percentileMicros(sorted []time.Duration, p float64) float64 {
	return float64(sorted[int(p*float64(len(sorted)-1))].Microseconds())
}

// runCallers runs b.N decisions from 64 goroutines and reports decisions/s
// and latency percentiles.
func runCallers(b *testing.B, decide func(ctx context.Context, i int) error) {
	b.ResetTimer()
	rate, lat, err := measureCallers(b.N, decide)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(rate, "decisions/s")
	b.ReportMetric(percentileMicros(lat, 0.50), "p50-µs")
	b.ReportMetric(percentileMicros(lat, 0.99), "p99-µs")
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

// BenchmarkRedisStore: 64 callers deciding on 1,000 subjects (or all on one,
// a hot API key, whose concurrent calls the store coalesces), one or three
// layers, with usage counting (production: tallied in memory, flushed once a
// second) and without.
func BenchmarkRedisStore(b *testing.B) {
	for _, cfg := range []struct {
		name     string
		layers   int
		noUsage  bool
		subjects int
	}{{"1Layer", 1, false, 1000}, {"3Layers", 3, false, 1000}, {"1LayerNoUsage", 1, true, 1000}, {"1LayerOneSubject", 1, false, 1}} {
		b.Run(cfg.name, func(b *testing.B) {
			client, prefix := benchRedisClient(b)
			store := newTestRedisStore(b, client, RedisOptions{Prefix: prefix, Timeout: time.Second, DisableUsage: cfg.noUsage})
			limits := []Limit{benchLimit,
				{Name: "fw", Algorithm: FixedWindow, Limit: 1e12, Window: time.Minute},
				{Name: "swc", Algorithm: SlidingWindowCounter, Limit: 1e12, Window: time.Minute}}[:cfg.layers]
			runCallers(b, func(ctx context.Context, i int) error {
				d, err := store.Allow(ctx, Request{Subject: "key:" + strconv.Itoa(i%cfg.subjects), Route: "GET /x", Limits: limits})
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

// redisBenchmarkArgs returns the redis-benchmark command line replaying the
// store's own EVALSHA for one subject and one layer (the script counts no
// usage: the store tallies it in memory).
func redisBenchmarkArgs(b *testing.B, client *redis.Client, prefix string, n int) []string {
	store := newTestRedisStore(b, client, RedisOptions{Prefix: prefix, Timeout: time.Second, DisableUsage: true})
	call, err := store.prepare(Request{Subject: "key:1", Route: "GET /x", Limits: []Limit{benchLimit}}, true)
	if err != nil {
		b.Fatal(err)
	}
	host, port, _ := strings.Cut(client.Options().Addr, ":")
	args := []string{"-h", host, "-p", port, "-n", strconv.Itoa(n), "-c", strconv.Itoa(callers), "-P", "16", "-q",
		"EVALSHA", store.ScriptSHA(), strconv.Itoa(len(call.keys))}
	args = append(args, call.keys...)
	args = append(args, call.now)
	for _, a := range call.args {
		args = append(args, fmt.Sprint(a))
	}
	return args
}

func runRedisBenchmark(args []string) (float64, error) {
	out, err := exec.Command("redis-benchmark", args...).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("redis-benchmark: %w: %s", err, out)
	}
	m := rpsLine.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("redis-benchmark printed no rate: %s", out)
	}
	return strconv.ParseFloat(string(m[1]), 64)
}

// BenchmarkRedisBenchmarkTool runs redis-benchmark with 64 clients, 16
// commands pipelined per client, on the store's own EVALSHA call for one
// subject and one layer: the ceiling a pipelining client could reach.
// Compare with BenchmarkRedisStore/1Layer.
func BenchmarkRedisBenchmarkTool(b *testing.B) {
	if _, err := exec.LookPath("redis-benchmark"); err != nil {
		b.Fatalf("redis-benchmark is needed: %v", err)
	}
	client, prefix := benchRedisClient(b)
	args := redisBenchmarkArgs(b, client, prefix, max(b.N, 1000))
	b.ResetTimer()
	rps, err := runRedisBenchmark(args)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(rps, "decisions/s")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkRedisInterleaved runs the store, redis_rate and redis-benchmark
// in alternating rounds of 20,000 decisions (one round of each per b.N), so
// the load other processes put on a shared machine hits all three alike, and
// reports the median of each round's ratios. Run it with -benchtime 10x.
func BenchmarkRedisInterleaved(b *testing.B) {
	const per = 20_000
	client, prefix := benchRedisClient(b)
	storeUsage := newTestRedisStore(b, client, RedisOptions{Prefix: prefix + "u:", Timeout: time.Second})
	storeBare := newTestRedisStore(b, client, RedisOptions{Prefix: prefix + "n:", Timeout: time.Second, DisableUsage: true})
	limiter := redis_rate.NewLimiter(client)
	rrLimit := redis_rate.Limit{Rate: 1e9, Burst: 1e9, Period: time.Second}
	tool := redisBenchmarkArgs(b, client, prefix+"t:", per)
	storeDecide := func(s *RedisStore) func(context.Context, int) error {
		return func(ctx context.Context, i int) error {
			_, err := s.Allow(ctx, Request{Subject: "key:" + strconv.Itoa(i%1000), Route: "GET /x", Limits: []Limit{benchLimit}})
			return err
		}
	}
	var vsRate, bareVsTool, usageRate, bareRate, rrRate, toolRate, usageP99, bareP99, rrP99, usageP50 []float64
	b.ResetTimer()
	for range b.N {
		r, lat, err := measureCallers(per, storeDecide(storeUsage))
		if err != nil {
			b.Fatal(err)
		}
		usageRate, usageP50, usageP99 = append(usageRate, r), append(usageP50, percentileMicros(lat, .5)), append(usageP99, percentileMicros(lat, .99))
		rb, lat, err := measureCallers(per, storeDecide(storeBare))
		if err != nil {
			b.Fatal(err)
		}
		bareRate, bareP99 = append(bareRate, rb), append(bareP99, percentileMicros(lat, .99))
		rr, lat, err := measureCallers(per, func(ctx context.Context, i int) error {
			_, err := limiter.Allow(ctx, prefix+"rr{key:"+strconv.Itoa(i%1000)+"}", rrLimit)
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		rrRate, rrP99 = append(rrRate, rr), append(rrP99, percentileMicros(lat, .99))
		t, err := runRedisBenchmark(tool)
		if err != nil {
			b.Fatal(err)
		}
		toolRate = append(toolRate, t)
		vsRate = append(vsRate, r/rr)
		bareVsTool = append(bareVsTool, rb/t)
	}
	b.StopTimer()
	median := func(v []float64) float64 { slices.Sort(v); return v[len(v)/2] }
	b.ReportMetric(median(usageRate), "store-dec/s")
	b.ReportMetric(median(usageP50), "store-p50-µs")
	b.ReportMetric(median(usageP99), "store-p99-µs")
	b.ReportMetric(median(bareRate), "store-nousage-dec/s")
	b.ReportMetric(median(bareP99), "store-nousage-p99-µs")
	b.ReportMetric(median(rrRate), "redis_rate-dec/s")
	b.ReportMetric(median(rrP99), "redis_rate-p99-µs")
	b.ReportMetric(median(toolRate), "redis-benchmark-dec/s")
	b.ReportMetric(median(vsRate), "store/redis_rate")
	b.ReportMetric(median(bareVsTool), "store-nousage/redis-benchmark")
	b.ReportMetric(0, "ns/op")
}
