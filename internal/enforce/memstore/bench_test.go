package memstore

// Benchmarks of the stores beside the libraries they replace; no figure is
// asserted anywhere.
//
//	go test -run '^$' -bench 'MemoryInterleaved' -benchtime 10x -count 3 ./internal/enforce
//	go test -run '^$' -bench 'RedisInterleaved' -benchtime 8x -count 3 ./internal/enforce
//	go test -run '^$' -bench 'MemoryStore|XTimeRate' -benchtime 1s -count 3 ./internal/enforce
//	go test -run '^$' -bench 'RedisStore|RedisRate|RedisBenchmarkTool' -benchtime 100000x -count 3 ./internal/enforce
//	go test -run '^$' -bench 'RedisScriptBatch' -benchtime 1500x ./internal/enforce   # script time per decision (SLOWLOG)
//
// (TEST_REDIS_URL=redis://127.0.0.1:<port>/0 points them at a private
// redis-server; wrap a run in /proc/<redis pid>/stat readings for Redis's
// CPU per decision.)
//
// Figures of 2026-11-30, second session: a quiet 2-core machine (AMD EPYC,
// load average under 1 before each run, nothing else building), Go 1.26,
// Redis 7.0.15 on loopback, a private redis-server. Ranges are over runs;
// the interleaved benchmarks alternate the contenders round by round and
// report medians, which is why their ratios are the figures to quote.
//
// Memory store, one token-bucket layer, AllowInto (0 allocs/op for every
// algorithm once a subject's usage entry for the bucket exists, asserted by
// TestMemoryStoreAllowIntoAllocatesNothing): see memory_bench_test.go for
// the table. That session measured it with usage off: 1.08 - 1.24x
// x/time/rate serially, 1.16 - 1.28x in parallel. Since 2026-12-01 the
// interleaved benchmarks run it as the portal does, usage counting and
// metrics on: 1.31x (hot key) and 1.42x (100,000 keys) serially, 1.62x and
// 1.35x in parallel, medians of four runs at load average 11 to 20 on a
// 2-core Intel Xeon. On 2026-12-02, after the one-limit fast path, at load
// average 2.9 to 4.6 on the same machine, before and after alternating:
// hot key 1.29x -> 1.09x serially, 1.43x -> 1.27x in parallel; 100,000 keys
// 1.35x -> 1.34x and 1.45x -> 1.46x (medians of four runs).
//
// Redis store, 64 concurrent callers (BenchmarkRedisInterleaved -benchtime
// 8x, and BenchmarkRedisStore / BenchmarkRedisRate -benchtime 200000x).
// "Before" is commit 6070082, where each decision was one script call and
// only identical calls of one subject shared one; "after" decides a whole
// batch in one call (scripts/decide.lua), each distinct limit's arguments
// listed once per call, yields once before cutting a batch under load, and
// builds the script's tables presized:
//
//	                                     before               after
//	1 layer, 1k subjects, dec/s      131k - 140k          183k - 219k
//	  over redis_rate (interleaved)  1.55 - 1.73x         2.26 - 2.55x
//	  p50 / p99                      0.45 / 1.2 - 1.4 ms  0.28 - 0.32 / 0.82 - 1.16 ms
//	3 layers, 1k subjects, dec/s     (29k, first session) 94k - 96k, p99 1.5 - 1.6 ms
//	1 layer, one hot subject, dec/s  (134.5k, first)      250k - 327k, p99 0.56 - 0.88 ms
//	go-redis/redis_rate/v10          75k - 92k, p99 3.2 - 3.8 ms (same runs)
//
// Along the way, before the limits were listed once per call, three sets
// gave 2.01 - 2.18x (175k - 197k); three or four pipelines instead of two
// made no difference beyond the noise.
//
// redis-benchmark -c 64 -P 16 replaying the store's own call for one
// request (one script call per decision, the most a pipelining client of the
// old design could reach): 134k - 141k/s, so the store (usage off) runs at
// 1.54 - 1.60x of it; before batching the ratio was 0.70 - 0.75. Batched by
// hand with redis-benchmark (32 requests on random subjects per call, -P 8),
// Redis spends 3.1 - 3.2 us per decision against about 8 us for a request
// alone (the fixed price of a command, EVALSHA, TIME, the limits' arguments
// and the reply, is paid once per batch). Redis CPU, from /proc, was 6.0 us
// per decision before (86 % of a core at 143k/s): Redis was the limit, the
// client used half a core. After, at 197k/s, Redis used 79 % of a core and
// the client half of one: 64 closed-loop callers wait on two batches in
// flight.
//
// Targets (2x redis_rate, 70 % of redis-benchmark, p99 under 2 ms) are met
// in every run of this session's final code.
//
// End to end (scripts/bench-e2e.sh, RUNS=5, wrk -t2 -c64 -d8s on
// /api/items/42, one anonymous subject, two layers, interleaved runs):
//
//	                 req/s median   share of bare
//	bare             82.8k          100 %
//	sluice (Redis)   51.0k          62 % (runs 43.7k - 52.9k; 61 - 62 % in five earlier 4 - 5 run sets)
//	sluice_failover  48.2k          58 % (59 - 60 % earlier; 62 % in a later set without its own deadline, sluice 64 %)
//	memory           72.8k          88 %
//	redis_rate       34.8k          42 %
//
// At the start of the session (same machine, commit 6070082) sluice was at
// 61 - 65 % in two 3-run sets, so the 60 % target was already met on a quiet
// machine; the first session's 37 - 46 % came from a machine loaded by other
// builds. Per request, from /proc: the server 20 - 23 us of CPU against
// bare's 12.3 - 13.3, Redis 4.5 - 6 us, wrk 7 us, on two cores. The server's
// extra is spread thin (the middleware 2.9 us, the pipeline worker's round
// trips 2.1 us, scheduling and GC the rest); one pipeline instead of two
// halves the script calls per request (0.08 -> 0.04) and Redis CPU per
// request (4.6 -> 3.2 us) but gives the same req/s (48.5k both, 4 runs).
//
// 2026-12-01, the outage-not-stall breaker and batch numbering (issue 10),
// against commit 904e08f, the two test binaries alternating on one private
// redis-server, three BenchmarkRedisInterleaved -benchtime 8x runs each, load
// average 3.5 - 4.4 from other engineers' builds (so only the ratios inside
// one run mean much):
//
//	                                   before                  after
//	store dec/s (runs)                 157k, 149k, 175k        176k, 137k, 179k
//	store (usage off) / redis-benchmark 1.38, 1.48, 1.47        1.46, 1.33, 1.49
//	store / redis_rate                 2.02, 2.09, 1.68        1.78, 2.30, 1.82
//
// Medians: 1.466 against 1.464 of redis-benchmark, no cost beyond the noise.
// The script-call counts below are unchanged.
//
// Round trips: TestRedisStoreScriptCalls counts EVALSHA calls on a private
// redis-server from INFO commandstats: one per decision made alone, for 1,
// 3 and 5 layers; one for 100 decisions queued behind a frozen Redis; and
// 101 with a Cluster or Ring client, which gets a script call per subject
// (TestRedisStoreOnACluster runs on a real three-master cluster).
//
// 2026-12-01, issue 17 items 3 and 4, on a 2-core Intel Xeon shared with six
// other engineers' builds and tests: load average 12 - 20 throughout, so
// absolute rates moved threefold between runs of one binary and only
// medians of alternating runs mean anything. Test binaries of commit
// 1f1331f ("before", with this file's benchmarks) and of this session's
// code alternated on one private redis-server (Redis 7.0.15), six runs of
// BenchmarkRedisInterleaved each (three at -benchtime 5x, three at 7x), and
// six of BenchmarkRedisScriptBatch -benchtime 1500x, whose figure is the
// median over calls of SLOWLOG's duration (Redis's own time in the script)
// per decision in a batch of 32:
//
//	                                       before               after
//	store / redis_rate, 1k subjects       1.03 - 3.76, med 1.68  1.23 - 2.08, med 1.83
//	3 layers / 1 layer (dec/s)            0.23 - 0.45, med 0.36  0.35 - 0.46, med 0.41
//	store p99, 64 callers                 5.8 - 22.7 ms        6.5 - 12.0 ms
//	script us per decision, 1 layer       5.8 - 10.3, med 6.2    5.4 - 6.2, med 5.6
//	  3 layers                            15.5 - 17.9, med 16.5  13.1 - 14.8, med 13.7
//	  sliding log                         15.0 - 18.6, med 16.9  10.3 - 13.1, med 11.5
//	decisions per script call             24.5 - 27.4          24.1 - 27.0
//
// The script figures are inflated by the load (Redis is preempted inside a
// call): at load 7, alternating the two scripts call by call in one run
// (SCRIPT_AB), 1 layer took 4.09 us before and 4.00 after, 3 layers 13.6 and
// 11.3. What moved them: the field names F:#, F:+, F:- built once per call
// per limit, not per decision; the HMGET field list and positions of a
// request reused by the next one with the same limits; only the fields that
// changed written (a window's index moves once a window: 3 layers write 3
// fields, not 6); library functions as locals; and a batch of one plan's
// requests sending its mode and limits once ('u'), 81 arguments fewer for 27
// requests (Redis CPU per decision 6 % lower over four alternating runs of
// the script benchmark, from /proc, within reach of the noise). A variant of
// the script whose HMGET returned a cached reply and whose HSET did nothing
// took 9 us of the 3-layer decision's 14 and 3 of the 1-layer's 5.5: the
// Lua arithmetic, not the Redis calls, is most of a multi-layer decision.
//
// Later on 2026-12-01, issue 17 item 3 on the script's side, the same Xeon
// and Redis: test binaries of commit f62866d ("before") and of this code
// alternating on one private redis-server, four runs each of
// BenchmarkRedisInterleaved -benchtime 5x, and four of
// BenchmarkRedisScriptBatch -benchtime 1500x with SCRIPT_AB (the two scripts
// alternating call by call); load average 1.7 - 6.1 (1-minute, read before
// each run; the benchmark itself holds about two). Medians over the runs
// (of four: the mean of the middle two), ranges in brackets; instructions from testdata/count_decide.lua, which
// the load does not move:
//
//	                                       before                 after
//	3 layers / 1 layer (dec/s)             0.52 (0.45 - 0.58)     0.61 (0.59 - 0.63)
//	script us per decision, 1 layer        4.86 (4.70 - 5.17)     4.52 (4.46 - 4.81)
//	  3 layers                             13.0 (12.7 - 13.9)     9.5 (9.3 - 10.1)
//	  SCRIPT_AB, 1 layer                   5.06 (4.44 - 5.50)     4.63 (4.00 - 5.03)
//	  SCRIPT_AB, 3 layers                  12.2 (11.5 - 12.7)     9.3 (9.0 - 9.8)
//	  SCRIPT_AB, sliding log               10.1 (10.0 - 10.3)     10.0 (9.7 - 10.1)
//	Lua instructions per decision, 1 layer 285                    247
//	  3 layers                             1,082                  626
//	store / redis_rate                     2.86 (2.47 - 3.24)     3.08 (2.08 - 3.52)
//
// (The script-time rows of the interleaved benchmark come from INFO
// commandstats.) An earlier set of four pairs, at load 6.6 - 7.4 with only
// the first two changes below, gave 3 layers / 1 layer 0.51 before and 0.645
// after (0.63 - 0.71). What moved them: a request of several counter
// limits, none edited and not coalesced, is decided in one pass straight
// into the reply, its changed fields staged in the HSET's arguments and sent
// only once every layer has admitted (the general path's table of nine
// results per layer, its write pass and its field pass stay for edits,
// sliding logs and coalesced requests); stored numbers parsed by arithmetic
// rather than tonumber (a third of the cost per string on Redis's Lua, seven
// strings per 3-layer decision); rescale comparing a limit's figures before
// its code; and a uniform call's requests past the first taking their keys
// and nothing else. Left in a 3-layer decision: ten HMGET fields (about
// 0.2 us each at this load), seven strings parsed, three fields written and
// fourteen reply values, which the script's argument and reply format fix.
//
// Sliding log (issue 17 item 4): TestSlidingLogMemory logs 10,000 requests
// a minute and reads MEMORY USAGE at 8.9 bytes per logged request, against
// 137 for the sorted set and metadata hash it replaced.
//
// 2026-12-01, issue 17 item 3, the Go side of the hand-off (same 2-core
// Intel Xeon, Go 1.26, Redis 7.0.15 on a private redis-server, load average
// 3.4 - 5.1 from other engineers' builds). What changed: one shared tick
// (closed every Timeout/8) bounds the callers' waits instead of a timer
// Reset and Stopped per call; the caller's context is watched only when it
// has a deadline, so a request context's Done channel is not allocated per
// decision; the EVALSHA command is built with its keys as pointers into the
// calls instead of boxed by EvalSha; on a single Redis the reply is read as
// raw RESP and its integers parsed without boxing; the near cache is keyed
// by a struct instead of a concatenated string. Allocations per decision
// (BenchmarkRedisStore/1LayerNoUsage, Allow): 7 -> 4; in the portal the
// near-cache key and HasErrorPrefix's allocations per batch went too. Test
// binaries of the branch's base (f62866d) and of this code (four of the
// nine runs one commit earlier, which this benchmark does not tell apart)
// alternating, nine BenchmarkRedisInterleaved -benchtime 2x runs each:
//
//	                                 before                  after
//	store / redis_rate, 1k subjects  1.74 - 3.87, med 1.95   1.73 - 2.98, med 2.37
//	store p99, 64 callers            1.3 - 4.9 ms, med 2.6   1.6 - 6.0 ms, med 2.2
//	decisions per script call        25.4 - 27.4             26.3 - 28.0
//
// Within the noise: Redis is the limit here (the client used about half a
// core at 140k decisions/s, and its CPU per decision, user plus system over
// 300,000 decisions of BenchmarkRedisStore/1Layer, was 4.5 - 5.0 us
// before and 4.3 - 5.0 after, four alternating runs at load 3). Without the yield
// before a batch is cut the batches shrank from 27 to 16 - 21 decisions and
// nothing got faster, so it stays.
//
// The same with today's script on both sides (this branch merged with
// main, against main at 6c8b644 alternating, five runs each, load 3.0 -
// 3.2): store / redis_rate 1.76 - 3.81, med 3.40 (main) against 2.65 -
// 5.29, med 3.79; p99 1.9 - 4.2, med 3.5 ms against 1.3 - 4.6, med 2.2 ms;
// store decisions/s, med 122k against 116k. redis_rate's own rate moved
// from 103k to 34k between runs, which is most of the ratios' spread.
//
// End to end, scripts/bench.sh BASELINE=main STORES=redis ROUNDS=4, this
// branch merged with main against main (1dababa), load 3.1 - 4.6: the
// portal's CPU per request of the limited route 0.97x main's with an
// anonymous caller (0.91 - 1.05 over the rounds, 35.7 against 38.9 us) and
// 0.96x with an API key (0.89 - 0.98, 38.3 against 39.3); the unlimited
// twins, which never reach the store, came out at 0.85x and 0.99x, which is
// the noise to read these against. CPU share 47 % (main 53 %) anonymous,
// 52 % (50 %) with a key: the 70 % target is not met. An earlier run
// against main at 6c8b644 (load 5.5 - 9.3) gave 0.91x (0.87 - 0.99) and
// 1.00x (0.98 - 1.00). Of the portal's profile under wrk, the pipeline
// worker is about 3 us per limited request (batches of about 7 there;
// mostly go-redis's command path and the write and read system calls); the
// rest of the difference is the scheduler parking and waking the handlers,
// the worker and net/http's background reader, which this code does not
// reach.
//
// 2026-12-03, issue 17 item 3, the script's state layout (branch lua; 2-core
// AMD EPYC shared with other helpers, Go 1.26, Redis 7.0.15 on a private
// redis-server). What changed: a limit's whole state is one field,
// <name>@<figures>, of packed doubles ending in the record's TTL mark, read
// with one HGET (one limit) or an HMGET of one field per limit and written
// with one HSET of the records that changed, so Redis no longer formats
// every number handed to redis.call with %.17g (about 2,000 instructions
// each in 7.0) nor parses them back; the hash's 'e' field is gone, the TTL
// moving with PEXPIRE GT (NX for a new hash) only when a state outlives its
// record's mark (Redis >= 7.0); rescale runs only for a missing record; a
// sliding log's TTL moves once an eighth of a window instead of per request,
// and its metadata and entries are packed by struct in C instead of be7.
// A missing record is looked for among the hash's fields under the limit's
// former figures, or in the former layout, which it replaces.
// redis-server instructions in EVALSHA per decision (callgrind,
// BenchmarkRedisScriptBatch, 400 minus 100 calls of 32, repeatable whatever
// the load), main's script against this one:
//
//	1 layer        49.8k -> 39.7k  (0.80x)
//	3 layers      110.8k -> 86.6k  (0.78x)
//	sliding log   101.6k -> 66.9k  (0.66x)
//
// Script time per decision (SCRIPT_AB=testdata/decide_main.lua, the two
// scripts alternating call by call, medians of five runs, load 3.7 - 5.5):
// 1 layer 4.34 -> 3.50 us, 3 layers 9.06 -> 7.22 us; sliding log 20.2 ->
// 16.1 us (load 3.1 - 4.7). Lua instructions (count_decide.lua): 247 -> 254 and 626 -> 669:
// the gain is Redis's side of the calls, not the Lua. MEMORY USAGE of a
// subject's hash: 1 layer 128 bytes either way, 3 layers 272 -> 240.
// BenchmarkRedisInterleaved, test binaries of main (2c9cbb4) and of this
// code alternating, three -benchtime 4x runs each at load 2.8 - 10 (other
// helpers' benchmarks): store-3layers/1layer 0.51 - 0.61 (main) against
// 0.65 - 0.87; store / redis_rate 2.24 - 3.87 against 2.65 - 3.09, which
// the load (redis_rate itself ran at 9.7k - 40k/s) leaves unreadable.

import (
	"context"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sluicehq/sluice/internal/enforce"
	"golang.org/x/time/rate"
)

const benchKeys = 100_000

// benchMaxSubjects sizes the benchmarks' memory stores above benchKeys, so
// the 100,000-key runs measure live subjects found, as they always have,
// not the eviction a store smaller than its active subjects goes through.
const benchMaxSubjects = 2 * benchKeys

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
var benchLimit = enforce.Limit{Name: "tb", Algorithm: enforce.TokenBucket, Limit: 1e6, Window: time.Hour, Burst: 1e12}

// portalMemoryStore is a memory store configured as the portal runs it:
// usage counting on and its decision counters registered with Prometheus.
func portalMemoryStore() *Store {
	return New(Options{Registerer: prometheus.NewRegistry(), MaxSubjects: benchMaxSubjects})
}

func fillBucket(store *Store, subject string) {
	l := benchLimit
	l.Cost = 1e9
	store.Allow(context.Background(), enforce.Request{Subject: subject, Route: "GET /x", Limits: []enforce.Limit{l}})
}

func BenchmarkMemoryStore(b *testing.B) {
	subjects := benchSubjects()
	for _, cfg := range []struct {
		name string
		opts Options
	}{
		{"Usage", Options{MaxSubjects: benchMaxSubjects}},
		{"NoUsage", Options{DisableUsage: true, MaxSubjects: benchMaxSubjects}},
	} {
		b.Run(cfg.name+"/HotKey/Serial", func(b *testing.B) {
			store := New(cfg.opts)
			fillBucket(store, "key:hot")
			req := enforce.Request{Subject: "key:hot", Route: "GET /x", Limits: []enforce.Limit{benchLimit}}
			layers := make([]enforce.LayerResult, 0, 1)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				store.AllowInto(ctx, req, layers)
			}
		})
		b.Run(cfg.name+"/HotKey/Parallel", func(b *testing.B) {
			store := New(cfg.opts)
			fillBucket(store, "key:hot")
			req := enforce.Request{Subject: "key:hot", Route: "GET /x", Limits: []enforce.Limit{benchLimit}}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				layers := make([]enforce.LayerResult, 0, 1)
				for pb.Next() {
					store.AllowInto(ctx, req, layers)
				}
			})
		})
		b.Run(cfg.name+"/100kKeys/Serial", func(b *testing.B) {
			store := New(cfg.opts)
			req := enforce.Request{Route: "GET /x", Limits: []enforce.Limit{benchLimit}}
			layers := make([]enforce.LayerResult, 0, 1)
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
			store := New(cfg.opts)
			ctx := context.Background()
			for _, s := range subjects {
				fillBucket(store, s)
			}
			var seed atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				req := enforce.Request{Route: "GET /x", Limits: []enforce.Limit{benchLimit}}
				layers := make([]enforce.LayerResult, 0, 1)
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
		store := New(Options{})
		fillBucket(store, "key:hot")
		req := enforce.Request{Subject: "key:hot", Route: "GET /x", Limits: []enforce.Limit{benchLimit}}
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
// of the memory store (AllowInto, usage counting and metrics on, as the
// portal runs it) and of x/time/rate, hot key and 100,000 keys, one round
// of each per b.N (at least minBenchRounds), and reports the median of each
// round's ratio, so a shared machine's load hits both alike. Run it with
// -benchtime 10x.
func BenchmarkMemoryInterleaved(b *testing.B) {
	const per = 200_000
	subjects := benchSubjects()
	store := portalMemoryStore()
	for _, s := range append(subjects, "key:hot") {
		fillBucket(store, s)
	}
	hot := rate.NewLimiter(rate.Limit(1e12), 1e12)
	limiters := make(map[string]*rate.Limiter, benchKeys)
	for _, s := range subjects {
		limiters[s] = rate.NewLimiter(rate.Limit(1e12), 1e12)
	}
	ctx := context.Background()
	layers := make([]enforce.LayerResult, 0, 1)
	req := enforce.Request{Route: "GET /x", Limits: []enforce.Limit{benchLimit}}
	timeIt := func(f func(i int)) float64 {
		start := time.Now()
		for i := range per {
			f(i)
		}
		return float64(time.Since(start).Nanoseconds()) / per
	}
	var hotStore, hotRate, hotRatio, manyStore, manyRate, manyRatio []float64
	b.ResetTimer()
	for range benchRounds(b) {
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

// minBenchRounds is the fewest rounds an interleaved benchmark runs, so a
// plain -bench run (b.N of 1 for a slow round) still reports a median.
const minBenchRounds = 5

// benchRounds is how many rounds an interleaved benchmark runs for b.
func benchRounds(b *testing.B) int { return max(b.N, minBenchRounds) }
