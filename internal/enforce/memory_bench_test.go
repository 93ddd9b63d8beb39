package enforce

// BenchmarkMemoryInterleavedParallel is BenchmarkMemoryInterleaved with
// GOMAXPROCS goroutines per round: the memory store (AllowInto, usage off)
// beside golang.org/x/time/rate, hot key and 100,000 keys, in alternating
// rounds, reporting medians. No figure is asserted.
//
//	go test -run '^$' -bench 'MemoryInterleaved' -benchtime 10x -count 3 ./internal/enforce
//
// Figures of 2026-11-30 on the 2-core shared build machine while other
// engineers built and tested (load average 2.2 - 3.8), medians of rounds,
// ranges over runs:
//
//	                      store ns    x/time/rate ns   store / x/time/rate
//	hot key, serial       141 - 251      127 - 179        1.13 - 1.45x
//	100k keys, serial     318 - 486      269 - 460        1.11 - 1.28x
//	hot key, parallel     259 - 313      183 - 198        1.34 - 1.61x
//	100k keys, parallel   262 - 318      186 - 303        1.24 - 1.42x
//
// Serially the 1.5x target holds in every run; in parallel both contend on
// two shared cores and the hot key is one lock in both (x/time/rate's
// Limiter mutex, the store's shard), so the ratio swings with the load.
// Before the changes of that day the serial ratios were 2.19 - 2.39x (hot
// key) and 1.52 - 1.81x (100k keys) in the same interleaved runs.

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

func BenchmarkMemoryInterleavedParallel(b *testing.B) {
	const per = 200_000
	workers := runtime.GOMAXPROCS(0)
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
	limits := []Limit{benchLimit}
	// timeIt runs per decisions split over the workers, worker w taking
	// the indexes w, w+workers, ..., and returns the wall time per decision.
	timeIt := func(f func(layers []LayerResult, i int)) float64 {
		var wg sync.WaitGroup
		start := time.Now()
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				layers := make([]LayerResult, 0, 1)
				for i := w; i < per; i += workers {
					f(layers, i)
				}
			}()
		}
		wg.Wait()
		return float64(time.Since(start).Nanoseconds()) / per
	}
	ctx := context.Background()
	var hotStore, hotRate, hotRatio, manyStore, manyRate, manyRatio []float64
	b.ResetTimer()
	for range b.N {
		s := timeIt(func(layers []LayerResult, _ int) {
			store.AllowInto(ctx, Request{Subject: "key:hot", Route: "GET /x", Limits: limits}, layers)
		})
		r := timeIt(func([]LayerResult, int) { hot.Allow() })
		hotStore, hotRate, hotRatio = append(hotStore, s), append(hotRate, r), append(hotRatio, s/r)
		s = timeIt(func(layers []LayerResult, i int) {
			store.AllowInto(ctx, Request{Subject: subjects[i%benchKeys], Route: "GET /x", Limits: limits}, layers)
		})
		r = timeIt(func(_ []LayerResult, i int) { limiters[subjects[i%benchKeys]].Allow() })
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
