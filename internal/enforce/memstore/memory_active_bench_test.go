package memstore

import (
	"context"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sluicehq/sluice/internal/enforce"
	"golang.org/x/time/rate"
)

// BenchmarkMemoryActiveSubjects decides round robin over 10,000 and over
// 100,000 distinct active subjects, GOMAXPROCS goroutines each starting at
// its own offset, one token-bucket limit that always admits: the memory
// store as the portal runs it (its bound chosen by memory, usage counting
// on, decision counters registered), the same store held to 50,000
// subjects (the fixed default before the bound followed memory, so 100,000
// callers evict continually), and a map of x/time/rate limiters read
// without a lock. The key=value names let benchstat put the sizes side by
// side:
//
//	go test -run '^$' -bench 'MemoryActiveSubjects$' -count 6 ./internal/enforce/memstore/ > active.txt
//	go run golang.org/x/perf/cmd/benchstat@latest -col /subjects active.txt
//
// Figures are in docs/benchmarks.md ("Active subjects at scale").
func BenchmarkMemoryActiveSubjects(b *testing.B) {
	all := benchSubjects()
	for _, n := range []struct {
		name string
		n    int
	}{{"10k", 10_000}, {"100k", 100_000}} {
		subjects := all[:n.n]
		for _, st := range []struct {
			name string
			most int
		}{{"store", 0}, {"store-cap50k", 50_000}} {
			b.Run("impl="+st.name+"/subjects="+n.name, func(b *testing.B) {
				store := New(Options{Registerer: prometheus.NewRegistry(), MaxSubjects: st.most})
				for _, s := range subjects {
					fillBucket(store, s)
				}
				ctx := context.Background()
				var seed atomic.Int64
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					req := enforce.Request{Route: "GET /x", Limits: []enforce.Limit{benchLimit}}
					layers := make([]enforce.LayerResult, 0, 1)
					i := int(seed.Add(7919))
					for pb.Next() {
						req.Subject = subjects[i%len(subjects)]
						store.AllowInto(ctx, req, layers)
						i++
					}
				})
				b.StopTimer()
				if n := store.Len(); st.most == 0 && n != len(subjects) {
					b.Fatalf("the store with the bound by memory holds %d subjects, want all %d: it evicted", n, len(subjects))
				}
			})
		}
		b.Run("impl=xrate/subjects="+n.name, func(b *testing.B) {
			limiters := make(map[string]*rate.Limiter, len(subjects))
			for _, s := range subjects {
				limiters[s] = rate.NewLimiter(rate.Limit(1e12), 1e12)
			}
			var seed atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := int(seed.Add(7919))
				for pb.Next() {
					limiters[subjects[i%len(subjects)]].Allow()
					i++
				}
			})
		})
	}
}

// BenchmarkMemoryActiveSubjectsInterleaved is BenchmarkMemoryActiveSubjects
// in alternating rounds of 200,000 parallel decisions each (the store over
// 10,000 and over 100,000 subjects, the store held to 50,000 over 100,000,
// and x/time/rate over both), one round of each per b.N (at least
// minBenchRounds), reporting medians of each round's figures, so a shared
// machine's load hits every contender alike. Its ratios are the figures to
// quote: store-100k/10k is how much slower a decision over 100,000
// subjects is than over 10,000, xrate-100k/10k the same for a map of
// x/time/rate limiters, which pays the same cache misses.
//
// Those rounds walk the subjects in the order their state was made, with
// the very strings the state was made with, which flatters both: the
// hardware prefetcher follows the walk through the states (and x/time/rate's
// limiters), and comparing a stored key with an identical string reads no
// key bytes. A server's callers come in another order, each request's
// subject a string of its own (parsed from a header, built from an
// address). So every round also runs the store and x/time/rate over
// arrivals: the same subjects in a shuffled order, each a copy made
// beforehand (the "arr" figures).
//
//	go test -run '^$' -bench MemoryActiveSubjectsInterleaved -benchtime 10x -count 5 ./internal/enforce/memstore/
func BenchmarkMemoryActiveSubjectsInterleaved(b *testing.B) {
	const per = 200_000
	workers := runtime.GOMAXPROCS(0)
	all := benchSubjects()
	few, many := all[:10_000], all
	// arrivals are subjects in a shuffled order, each a string of its own.
	arrivals := func(subjects []string, seed uint64) []string {
		out := make([]string, len(subjects))
		for i, j := range rand.New(rand.NewPCG(seed, 1)).Perm(len(subjects)) {
			out[i] = strings.Clone(subjects[j])
		}
		return out
	}
	fewArr, manyArr := arrivals(few, 1), arrivals(many, 2)
	newStore := func(most int, subjects []string) *Store {
		s := New(Options{Registerer: prometheus.NewRegistry(), MaxSubjects: most})
		for _, subject := range subjects {
			fillBucket(s, subject)
		}
		return s
	}
	storeFew, storeMany, storeCapped := newStore(0, few), newStore(0, many), newStore(50_000, many)
	limiters := make(map[string]*rate.Limiter, len(many))
	for _, s := range many {
		limiters[s] = rate.NewLimiter(rate.Limit(1e12), 1e12)
	}
	limits := []enforce.Limit{benchLimit}
	ctx := context.Background()
	// timeIt runs per decisions over subjects round robin, split over the
	// workers, each starting at its own offset, and returns the wall time
	// per decision.
	timeIt := func(subjects []string, decide func(layers []enforce.LayerResult, subject string)) float64 {
		var wg sync.WaitGroup
		start := time.Now()
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				layers := make([]enforce.LayerResult, 0, 1)
				off := w * 7919
				for i := range per / workers {
					decide(layers, subjects[(off+i)%len(subjects)])
				}
			}()
		}
		wg.Wait()
		return float64(time.Since(start).Nanoseconds()) / float64(per/workers*workers)
	}
	inStore := func(s *Store) func([]enforce.LayerResult, string) {
		return func(layers []enforce.LayerResult, subject string) {
			s.AllowInto(ctx, enforce.Request{Subject: subject, Route: "GET /x", Limits: limits}, layers)
		}
	}
	inRate := func(_ []enforce.LayerResult, subject string) { limiters[subject].Allow() }
	var sFew, sMany, sCapped, rFew, rMany, sRatio, rRatio, fewVsRate, sVsRate, cappedVsRate []float64
	var aFew, aMany, arFew, arMany, aRatio, arRatio, aVsRate []float64
	// The floor: what touching one random subject's 128 bytes costs with
	// no index at all, each subject's state found by its number in an
	// array, in the arrivals' order, with one atomic write (a decision
	// takes its subject's lock). Any store keeping state per subject pays
	// this much more over 100,000 subjects than over 10,000.
	type floorState struct {
		tokens atomic.Int64
		_      [120]byte
	}
	floor := make([]floorState, len(many))
	order := func(n int, seed uint64) []int32 {
		out := make([]int32, n)
		for i, j := range rand.New(rand.NewPCG(seed, 3)).Perm(n) {
			out[i] = int32(j)
		}
		return out
	}
	floorFew, floorMany := order(len(few), 1), order(len(many), 2)
	var fFew, fMany, fRatio []float64
	timeFloor := func(idx []int32) float64 {
		var wg sync.WaitGroup
		start := time.Now()
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				off := w * 7919
				for i := range per / workers {
					floor[idx[(off+i)%len(idx)]].tokens.Add(-1)
				}
			}()
		}
		wg.Wait()
		return float64(time.Since(start).Nanoseconds()) / float64(per/workers*workers)
	}
	b.ResetTimer()
	for range benchRounds(b) {
		a := timeIt(few, inStore(storeFew))
		c := timeIt(many, inStore(storeMany))
		d := timeIt(many, inStore(storeCapped))
		x := timeIt(few, inRate)
		y := timeIt(many, inRate)
		sFew, sMany, sCapped, rFew, rMany = append(sFew, a), append(sMany, c), append(sCapped, d), append(rFew, x), append(rMany, y)
		sRatio, rRatio = append(sRatio, c/a), append(rRatio, y/x)
		fewVsRate, sVsRate, cappedVsRate = append(fewVsRate, a/x), append(sVsRate, c/y), append(cappedVsRate, d/y)
		e := timeIt(fewArr, inStore(storeFew))
		f := timeIt(manyArr, inStore(storeMany))
		g := timeIt(fewArr, inRate)
		k := timeIt(manyArr, inRate)
		aFew, aMany, arFew, arMany = append(aFew, e), append(aMany, f), append(arFew, g), append(arMany, k)
		aRatio, arRatio, aVsRate = append(aRatio, f/e), append(arRatio, k/g), append(aVsRate, f/k)
		m, n := timeFloor(floorFew), timeFloor(floorMany)
		fFew, fMany, fRatio = append(fFew, m), append(fMany, n), append(fRatio, n/m)
	}
	b.StopTimer()
	if n := storeMany.Len(); n != len(many) {
		b.Fatalf("the store with the default bound holds %d subjects, want all %d: it evicted", n, len(many))
	}
	median := func(v []float64) float64 { slices.Sort(v); return v[len(v)/2] }
	b.ReportMetric(median(sFew), "store-10k-ns")
	b.ReportMetric(median(sMany), "store-100k-ns")
	b.ReportMetric(median(sRatio), "store-100k/10k")
	b.ReportMetric(median(sCapped), "cap50k-100k-ns")
	b.ReportMetric(median(rFew), "xrate-10k-ns")
	b.ReportMetric(median(rMany), "xrate-100k-ns")
	b.ReportMetric(median(rRatio), "xrate-100k/10k")
	b.ReportMetric(median(fewVsRate), "store/xrate-10k")
	b.ReportMetric(median(sVsRate), "store/xrate-100k")
	b.ReportMetric(median(cappedVsRate), "cap50k/xrate-100k")
	b.ReportMetric(median(aFew), "store-arr-10k-ns")
	b.ReportMetric(median(aMany), "store-arr-100k-ns")
	b.ReportMetric(median(aRatio), "store-arr-100k/10k")
	b.ReportMetric(median(arFew), "xrate-arr-10k-ns")
	b.ReportMetric(median(arMany), "xrate-arr-100k-ns")
	b.ReportMetric(median(arRatio), "xrate-arr-100k/10k")
	b.ReportMetric(median(aVsRate), "store/xrate-arr-100k")
	b.ReportMetric(median(fFew), "floor-arr-10k-ns")
	b.ReportMetric(median(fMany), "floor-arr-100k-ns")
	b.ReportMetric(median(fRatio), "floor-arr-100k/10k")
	b.ReportMetric(0, "ns/op")
}
