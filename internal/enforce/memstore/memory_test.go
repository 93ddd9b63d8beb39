package memstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/storetest"
)

func TestMemoryStoreEvictsIdleSubjects(t *testing.T) {
	const active = 5_000
	cases := []struct {
		name     string
		usage    bool
		idleFor  time.Duration // clock advance per round
		rounds   int
		maxLen   int // bound on Len after the rounds
		finalLen int // Len after everything expired and one sweep per shard
	}{
		// Each round brings `active` new subjects and leaves the previous
		// ones idle past their 1 s window; eviction keeps Len within a
		// small multiple of the active set instead of rounds*active.
		{name: "LimitStateExpiresWithItsWindow", idleFor: 2 * time.Second, rounds: 20, maxLen: 3 * active, finalLen: 0},
		// Usage series are kept for UsageRetention, then dropped too.
		{name: "UsageKeepsSubjectsForItsRetention", usage: true, idleFor: enforce.UsageRetention / 4, rounds: 20, maxLen: 7 * active, finalLen: 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clock := storetest.NewClock()
			store := New(Options{Now: clock.Now, DisableUsage: !tc.usage})
			limits := []enforce.Limit{{Name: "fw", Algorithm: enforce.FixedWindow, Limit: 3, Window: time.Second}}
			ctx := context.Background()
			now := storetest.Epoch
			peak := 0
			for round := 0; round < tc.rounds; round++ {
				clock.Set(now)
				for i := 0; i < active; i++ {
					req := enforce.Request{Subject: fmt.Sprintf("ip:%d.%d", round, i), Route: "GET /x", Limits: limits}
					if _, err := store.Allow(ctx, req); err != nil {
						t.Fatal(err)
					}
				}
				peak = max(peak, store.Len())
				now = now.Add(tc.idleFor)
			}
			t.Logf("peak Len %d over %d rounds of %d subjects", peak, tc.rounds, active)
			if peak > tc.maxLen {
				t.Errorf("peak Len = %d after %d rounds of %d subjects, want <= %d", peak, tc.rounds, active, tc.maxLen)
			}
			// Long after everything expired, one request per shard sweeps it.
			clock.Set(now.Add(2 * enforce.UsageRetention))
			for i := 0; i < 20*len(store.shards); i++ {
				if _, err := store.Peek(ctx, enforce.Request{Subject: fmt.Sprintf("late:%d", i), Limits: limits}); err != nil {
					t.Fatal(err)
				}
			}
			for i := 0; i < 20*len(store.shards); i++ {
				// Rejected by cost, so it writes no limit state; with usage off
				// it creates no subject either.
				over := []enforce.Limit{{Name: "fw", Algorithm: enforce.FixedWindow, Limit: 1, Window: time.Second, Cost: 2}}
				if _, err := store.Allow(ctx, enforce.Request{Subject: fmt.Sprintf("late:%d", i), Limits: over}); err != nil {
					t.Fatal(err)
				}
			}
			want := tc.finalLen
			if tc.usage {
				// The late rejected requests are counted in usage.
				want = 20 * len(store.shards)
			}
			if got := store.Len(); got != want {
				t.Errorf("Len after expiry = %d, want %d", got, want)
			}
		})
	}
}

func TestMemoryStoreKeepsActiveSubjectsThroughSweeps(t *testing.T) {
	clock := storetest.NewClock()
	store := New(Options{Now: clock.Now, DisableUsage: true, Shards: 1})
	ctx := context.Background()
	long := []enforce.Limit{{Name: "day", Algorithm: enforce.FixedWindow, Limit: 2, Window: 24 * time.Hour}}
	short := []enforce.Limit{{Name: "s", Algorithm: enforce.TokenBucket, Limit: 1, Window: time.Second}}
	if _, err := store.Allow(ctx, enforce.Request{Subject: "key:keep", Limits: long}); err != nil {
		t.Fatal(err)
	}
	// Enough short-lived subjects, past their windows, to force sweeps.
	for i := 0; i < 10*minSweepLen; i++ {
		clock.Set(storetest.Epoch.Add(time.Duration(i) * time.Second))
		if _, err := store.Allow(ctx, enforce.Request{Subject: fmt.Sprintf("ip:%d", i), Limits: short}); err != nil {
			t.Fatal(err)
		}
	}
	d, err := store.Allow(ctx, enforce.Request{Subject: "key:keep", Limits: long})
	if err != nil {
		t.Fatal(err)
	}
	if !d.Allowed || d.Layers[0].Remaining != 0 {
		t.Errorf("second request of the day: Allowed=%v Remaining=%d, want true 0 (state kept)", d.Allowed, d.Layers[0].Remaining)
	}
	if n := store.Len(); n > 2*minSweepLen {
		t.Errorf("Len = %d, want <= %d", n, 2*minSweepLen)
	}
}

func TestMemoryStoreAllowIntoAllocatesNothing(t *testing.T) {
	for _, alg := range enforce.Algorithms {
		if alg == enforce.Concurrency {
			continue // held by AcquireSlots, not decided by Allow (slots_test.go)
		}
		t.Run(string(alg), func(t *testing.T) {
			store := New(Options{})
			req := enforce.Request{Subject: "key:hot", Route: "GET /x", Limits: []enforce.Limit{{Name: "l", Algorithm: alg, Limit: 1 << 40, Window: time.Hour, Period: enforce.PeriodMonth}}}
			layers := make([]enforce.LayerResult, 0, 1)
			ctx := context.Background()
			// Warm up: the subject, its series and its log exist.
			for i := 0; i < 100; i++ {
				if _, err := store.AllowInto(ctx, req, layers); err != nil {
					t.Fatal(err)
				}
			}
			allocs := testing.AllocsPerRun(1000, func() {
				store.AllowInto(ctx, req, layers)
			})
			if allocs != 0 {
				t.Errorf("AllowInto allocates %.2f times per decision, want 0", allocs)
			}
		})
	}
}

func TestMemoryStoreSeesALimitSliceEditedInPlace(t *testing.T) {
	// The store caches a slice's validation by its address; an edit in
	// place must still be decided by the new figures.
	cases := []struct {
		name          string
		edit          func(l *enforce.Limit)
		wantAllowed   bool
		wantRemaining int64
		wantErr       bool
	}{
		// 1 of 5 spent: a cost of 5 no longer fits.
		{name: "RaisedCostRejects", edit: func(l *enforce.Limit) { l.Cost = 5 }, wantAllowed: false, wantRemaining: 4},
		// The same state under a higher limit: the one spent still counts.
		{name: "RaisedLimitKeepsWhatWasSpent", edit: func(l *enforce.Limit) { l.Limit = 10 }, wantAllowed: true, wantRemaining: 8},
		{name: "BrokenLimitIsRefused", edit: func(l *enforce.Limit) { l.Window = 0 }, wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clock := storetest.NewClock()
			store := New(Options{Now: clock.Now, DisableUsage: true})
			ctx := context.Background()
			limits := []enforce.Limit{{Name: "fw", Algorithm: enforce.FixedWindow, Limit: 5, Window: time.Hour}}
			req := enforce.Request{Subject: "key:1", Limits: limits}
			// Three peeks: the slice is cached from the second on.
			for range 3 {
				if _, err := store.Peek(ctx, req); err != nil {
					t.Fatal(err)
				}
			}
			if d, err := store.Allow(ctx, req); err != nil || !d.Allowed {
				t.Fatalf("first request: %+v, %v", d, err)
			}
			tc.edit(&limits[0])
			d, err := store.Allow(ctx, req)
			if tc.wantErr {
				if !errors.Is(err, enforce.ErrInvalidRequest) {
					t.Fatalf("Allow after the edit = %v, want ErrInvalidRequest", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed != tc.wantAllowed || d.Layers[0].Remaining != tc.wantRemaining || d.Layers[0].Limit != limits[0] {
				t.Errorf("after the edit: Allowed=%v Remaining=%d Limit=%+v, want %v %d %+v",
					d.Allowed, d.Layers[0].Remaining, d.Layers[0].Limit, tc.wantAllowed, tc.wantRemaining, limits[0])
			}
		})
	}
}

func TestMemoryStoreDecisionCarriesItsClockReading(t *testing.T) {
	cases := []struct {
		name   string
		offset time.Duration
		want   time.Time
	}{
		{"WholeSecond", 0, storetest.Epoch},
		{"Microseconds", 1500 * time.Microsecond, storetest.Epoch.Add(1500 * time.Microsecond)},
		// The store counts in whole microseconds; At says what it used.
		{"NanosecondsTruncated", 2*time.Microsecond + 999, storetest.Epoch.Add(2 * time.Microsecond)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clock := storetest.NewClock()
			clock.Set(storetest.Epoch.Add(tc.offset))
			store := New(Options{Now: clock.Now})
			req := enforce.Request{Subject: "key:1", Limits: []enforce.Limit{{Name: "fw", Algorithm: enforce.FixedWindow, Limit: 1, Window: time.Second}}}
			for _, peek := range []bool{false, true} {
				var d enforce.Decision
				var err error
				if peek {
					d, err = store.Peek(context.Background(), req)
				} else {
					d, err = store.Allow(context.Background(), req)
				}
				if err != nil {
					t.Fatal(err)
				}
				if !d.At.Equal(tc.want) {
					t.Errorf("peek=%v: At = %s, want %s", peek, d.At.Format(time.RFC3339Nano), tc.want.Format(time.RFC3339Nano))
				}
				// The fixed window ends on the next whole second.
				if end := d.At.Add(d.Layers[0].ResetAfter); !end.Equal(storetest.Epoch.Add(time.Second)) {
					t.Errorf("peek=%v: At+ResetAfter = %s, want %s", peek, end.Format(time.RFC3339Nano), storetest.Epoch.Add(time.Second).Format(time.RFC3339Nano))
				}
			}
		})
	}
}

func TestMemoryStoreDefaultClockFollowsTheWallClock(t *testing.T) {
	store := New(Options{DisableUsage: true})
	req := enforce.Request{Subject: "key:1", Limits: []enforce.Limit{{Name: "fw", Algorithm: enforce.FixedWindow, Limit: 1 << 40, Window: time.Hour}}}
	for range 3 {
		before := time.Now().Truncate(time.Microsecond)
		d, err := store.Allow(context.Background(), req)
		after := time.Now()
		if err != nil {
			t.Fatal(err)
		}
		// The monotonic clock may run a hair apart from the wall clock
		// between re-anchorings; a millisecond is far more than it drifts
		// in a second.
		if d.At.Before(before.Add(-time.Millisecond)) || d.At.After(after.Add(time.Millisecond)) {
			t.Errorf("At = %s, want within [%s, %s]", d.At.Format(time.RFC3339Nano), before.Format(time.RFC3339Nano), after.Format(time.RFC3339Nano))
		}
	}
}

// holdUntil gives sub a fixed-window state that matters until end (µs).
func holdUntil(sub *subjectState, end int64) {
	sub.lim0 = limitState{key: &limitKey{name: "w", Figures: enforce.Figures{Kind: enforce.KindFixedWindow, Window: end, Limit: 1}}, counter: enforce.CounterState{Count: 1, Has: true}}
	sub.nlimits = 1
}

func TestMemoryShardTable(t *testing.T) {
	// 64-bit hash collisions are too rare to provoke through the store, so
	// the table is exercised on a shard directly: subjects with one hash
	// (and every one here with one tag) share a bucket, fill it and go on
	// to the next, and take the entries of swept ones. A rebuild places
	// subjects by the hash the test gave them.
	hashes := map[string]uint64{"key:a": 7, "key:b": 7, "key:c": 7, "key:d": 8}
	sh := &memShard{sweepLen: minSweepLen, hash: func(s string) uint64 { return hashes[s] }}
	sh.table.Store(newSubjectTable(minTableBuckets))
	add := func(h uint64, subject string) *subjectState { return sh.add(h, subject, 0, 1000, 1<<40, nil) }
	a, b, c := add(7, "key:a"), add(7, "key:b"), add(7, "key:c")
	other := add(8, "key:d")
	if again := add(7, "key:b"); again != b {
		t.Errorf("adding a subject twice made a second state")
	}
	holdUntil(a, 100)
	holdUntil(b, 300)
	holdUntil(c, 100)
	holdUntil(other, 300)
	lookups := func(when string, cases []struct {
		subject string
		hash    uint64
		want    *subjectState
	}) {
		t.Helper()
		for _, tc := range cases {
			if got := sh.get(tc.hash, tc.subject); got != tc.want {
				t.Errorf("%s: get(%d, %q) = %p, want %p", when, tc.hash, tc.subject, got, tc.want)
			}
		}
	}
	lookups("before the sweep", []struct {
		subject string
		hash    uint64
		want    *subjectState
	}{{"key:a", 7, a}, {"key:b", 7, b}, {"key:c", 7, c}, {"key:d", 8, other}, {"key:e", 7, nil}, {"key:a", 8, nil}})
	sh.sweep(200, 1000)
	lookups("after the sweep", []struct {
		subject string
		hash    uint64
		want    *subjectState
	}{{"key:a", 7, nil}, {"key:b", 7, b}, {"key:c", 7, nil}, {"key:d", 8, other}})
	if !a.dead || !c.dead || b.dead || other.dead {
		t.Errorf("dead marks: a %v, b %v, c %v, d %v; want only a and c", a.dead, b.dead, c.dead, other.dead)
	}
	if got := sh.live.Load(); got != 2 {
		t.Errorf("live = %d after sweeping two of four, want 2", got)
	}
	// A swept subject comes back as a new state in the entry it left.
	a2 := add(7, "key:a")
	holdUntil(a2, 300)
	if a2 == a || a2.dead || sh.get(7, "key:a") != a2 {
		t.Errorf("re-adding a swept subject: got %p (old %p), dead %v", a2, a, a2.dead)
	}
	if bk := &sh.table.Load().buckets[7&sh.table.Load().mask]; bk.subs[0].Load() != a2 {
		t.Errorf("re-added subject not in the first entry its predecessor left")
	}
	if sh.used != 5 {
		t.Errorf("used = %d, want 5 (four subjects placed, one again)", sh.used)
	}
	// Growth: the table is rebuilt past half full, the overflow marks
	// cleared, and every live subject stays reachable, past full buckets
	// and past the entries freed by the sweep below.
	all := map[string]*subjectState{"key:a": a2, "key:b": b, "key:d": other}
	for i := range 200 {
		subject := fmt.Sprint("key:n", i)
		hashes[subject] = uint64(i % 13)
		all[subject] = add(hashes[subject], subject)
		holdUntil(all[subject], 300)
	}
	for subject, want := range all {
		if got := sh.get(hashes[subject], subject); got != want {
			t.Fatalf("after growing to %d buckets: get(%q) = %p, want %p", len(sh.table.Load().buckets), subject, got, want)
		}
	}
	if n := bucketEntries * len(sh.table.Load().buckets); 2*sh.used > n {
		t.Errorf("%d of %d entries used, more than half", sh.used, n)
	}
	// Sweeping every subject of one hash frees entries in full buckets;
	// those placed past them stay reachable.
	for subject, want := range all {
		if hashes[subject] == 3 {
			holdUntil(want, 100)
		}
	}
	sh.sweep(200, 1000)
	for subject, want := range all {
		got := sh.get(hashes[subject], subject)
		if hashes[subject] == 3 {
			want = nil
		}
		if got != want {
			t.Fatalf("after sweeping the subjects of hash 3: get(%q) = %p, want %p", subject, got, want)
		}
	}
	sh.sweep(400, 1000)
	if got := sh.live.Load(); got != 0 {
		t.Errorf("%d subjects left after everything expired, want 0", got)
	}
}

// TestMemoryStoreExactWhileSweeping: subjects reused round after round are
// swept (their previous window over) while other goroutines decide on them,
// by time and by size, on one shard; a decision that finds its subject
// swept must look again rather than count in a dead state, so every round
// admits exactly the limit per subject.
func TestMemoryStoreExactWhileSweeping(t *testing.T) {
	const subjects, goroutines, perSubject, limit, rounds = 200, 8, 2, 3, 30
	clock := storetest.NewClock()
	store := New(Options{Now: clock.Now, DisableUsage: true, Shards: 1, SweepInterval: time.Microsecond})
	limits := []enforce.Limit{{Name: "fw", Algorithm: enforce.FixedWindow, Limit: limit, Window: time.Second}}
	ctx := context.Background()
	for round := range rounds {
		clock.Set(storetest.Epoch.Add(time.Duration(round) * 2 * time.Second))
		admitted := make([]atomic.Int64, subjects)
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range perSubject {
					for i := range subjects {
						s := (i + g*subjects/goroutines) % subjects
						d, err := store.Allow(ctx, enforce.Request{Subject: fmt.Sprint("key:", s), Limits: limits})
						if err != nil {
							t.Error(err)
							return
						}
						if d.Allowed {
							admitted[s].Add(1)
						}
					}
				}
			}()
		}
		wg.Wait()
		for s := range subjects {
			if got := admitted[s].Load(); got != limit {
				t.Fatalf("round %d, subject %d: %d admitted, want exactly %d", round, s, got, limit)
			}
		}
	}
	if n := store.Len(); n > 2*subjects {
		t.Errorf("Len = %d for %d live subjects", n, subjects)
	}
}

// TestMemoryStoreNeverOveradmitsWhileSweeping runs on the wall clock with
// 2 ms windows and sweeps due at every decision, so subjects are swept all
// the time while goroutines decide on them: no window of any subject may
// admit more than the limit, which a decision counted in a swept (dead)
// state would break.
func TestMemoryStoreNeverOveradmitsWhileSweeping(t *testing.T) {
	const subjects, goroutines, limit = 16, 8, 3
	window := 2 * time.Millisecond
	store := New(Options{DisableUsage: true, Shards: 1, SweepInterval: time.Microsecond})
	limits := []enforce.Limit{{Name: "fw", Algorithm: enforce.FixedWindow, Limit: limit, Window: window}}
	ctx := context.Background()
	type slot struct {
		subject int
		window  int64
	}
	var mu sync.Mutex
	admitted := map[slot]int{}
	deadline := time.Now().Add(300 * time.Millisecond)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; time.Now().Before(deadline); i++ {
				s := i % subjects
				d, err := store.Allow(ctx, enforce.Request{Subject: fmt.Sprint("key:", s), Limits: limits})
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					mu.Lock()
					admitted[slot{s, d.At.UnixMicro() / window.Microseconds()}]++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	for k, n := range admitted {
		if n > limit {
			t.Errorf("subject %d, window %d: %d admitted, limit %d", k.subject, k.window, n, limit)
		}
	}
	t.Logf("%d subject-windows checked", len(admitted))
}

// probeLengths returns the mean and longest distance, in buckets, between
// where each subject's probe starts in its shard's table and where the
// subject sits: how many buckets (cache lines) past the first a lookup
// reads before it finds its subject.
func probeLengths(s *Store) (mean float64, longest uint64) {
	var sum, n uint64
	for i := range s.shards {
		t := s.shards[i].table.Load()
		for b := range t.buckets {
			for e := range bucketEntries {
				sub := t.buckets[b].subs[e].Load()
				if sub == nil {
					continue
				}
				d := (uint64(b) - s.hash(sub.subject())&t.mask) & t.mask
				sum += d
				n++
				longest = max(longest, d)
			}
		}
	}
	return float64(sum) / float64(n), longest
}

// TestMemoryStoreProbesStayShort holds the tables' probe chains to what
// buckets of seven at most half full give: a mean below 0.1 buckets past
// a subject's own (0.01 here, the longest 3 to 5), so a lookup reads one
// line of the table. When the shard and the probe's start both came from
// the hash's low bits, these 100,000 subjects walked 12.2 slots on average
// and 45 at worst (tables of 16-byte slots, half full: 0.31 and 19); in
// buckets, a shard's subjects would all start in one bucket in 64.
func TestMemoryStoreProbesStayShort(t *testing.T) {
	store := New(Options{MaxSubjects: 1_000_000})
	limits := []enforce.Limit{{Name: "tb", Algorithm: enforce.TokenBucket, Limit: 100, Window: time.Minute, Burst: 100}}
	for i := range 100_000 {
		if _, err := store.Allow(context.Background(), enforce.Request{Subject: "key:" + strconv.Itoa(i), Route: "GET /x", Limits: limits}); err != nil {
			t.Fatal(err)
		}
	}
	if got := store.Len(); got != 100_000 {
		t.Fatalf("store holds %d subjects, want 100000", got)
	}
	mean, longest := probeLengths(store)
	t.Logf("probe distance: mean %.3f buckets, longest %d", mean, longest)
	if mean >= 0.1 {
		t.Errorf("mean probe distance %.3f buckets, want below 0.1", mean)
	}
}

// TestSubjectStateLayout holds subjectState to the 128 bytes of one
// allocator size class, which lays it on exactly two cache lines, with
// everything a decision on a one-limit plan writes on the first and what it
// only reads on the second: the figures in memory_bench_test.go depend on
// it, and a field added in the wrong place would split the written line
// again without failing anything else.
func TestSubjectStateLayout(t *testing.T) {
	const line = 64
	var sub subjectState
	if got := unsafe.Sizeof(sub); got <= 112 || got > 128 {
		t.Errorf("subjectState is %d bytes, want 113 to 128 (the 128-byte size class)", got)
	}
	if got := unsafe.Sizeof(usageEntry{}); got != 16 {
		t.Errorf("usageEntry is %d bytes, want 16", got)
	}
	if got := unsafe.Sizeof(enforce.CounterState{}); got != 32 {
		t.Errorf("counterState is %d bytes, want 32", got)
	}
	counter := unsafe.Offsetof(sub.lim0) + unsafe.Offsetof(sub.lim0.counter)
	written := []struct {
		name       string
		start, end uintptr
	}{
		{"mu", unsafe.Offsetof(sub.mu), unsafe.Offsetof(sub.mu) + unsafe.Sizeof(sub.mu)},
		{"last", unsafe.Offsetof(sub.last), unsafe.Offsetof(sub.last) + unsafe.Sizeof(sub.last)},
		{"use0", unsafe.Offsetof(sub.use0), unsafe.Offsetof(sub.use0) + unsafe.Sizeof(sub.use0)},
		{"lim0.counter", counter, counter + unsafe.Sizeof(sub.lim0.counter)},
	}
	for _, f := range written {
		if f.end > line {
			t.Errorf("%s at bytes %d to %d, want it within the first cache line (a decision writes it)", f.name, f.start, f.end)
		}
	}
	read := []struct {
		name  string
		start uintptr
	}{
		{"lim0.key", unsafe.Offsetof(sub.lim0) + unsafe.Offsetof(sub.lim0.key)},
		{"lim0.ext", unsafe.Offsetof(sub.lim0) + unsafe.Offsetof(sub.lim0.ext)},
		{"dead", unsafe.Offsetof(sub.dead)},
		{"nlimits", unsafe.Offsetof(sub.nlimits)},
		{"inlineLen", unsafe.Offsetof(sub.inlineLen)},
		{"inline", unsafe.Offsetof(sub.inline)},
		{"long", unsafe.Offsetof(sub.long)},
		{"guard", unsafe.Offsetof(sub.guard)},
		{"extra", unsafe.Offsetof(sub.extra)},
	}
	for _, f := range read {
		if f.start < line {
			t.Errorf("%s at byte %d, want it on the second cache line (a decision only reads it)", f.name, f.start)
		}
	}
}

// TestMemoryStorePerKeyScopesOnTheFastPath: a PerKey limit's state written
// by a request without a key is the subject's own, and a request with a key
// must not decide over it, though it is the subject's first state under the
// cached set's key (the case the one-limit path in decideWith takes).
func TestMemoryStorePerKeyScopesOnTheFastPath(t *testing.T) {
	clock := storetest.NewClock()
	store := New(Options{Now: clock.Now})
	ctx := context.Background()
	limits := []enforce.Limit{{Name: "per-key", Algorithm: enforce.TokenBucket, Limit: 1, Window: time.Hour, Burst: 1, PerKey: true}}
	decide := func(key string) bool {
		t.Helper()
		d, err := store.Allow(ctx, enforce.Request{Subject: "app:1", Key: key, Route: "GET /x", Limits: limits})
		if err != nil {
			t.Fatal(err)
		}
		return d.Allowed
	}
	// The first decision validates the slice, the second caches it.
	if !decide("") {
		t.Fatal("first request without a key rejected, want admitted")
	}
	if decide("") {
		t.Fatal("second request without a key admitted, want rejected: the burst is 1")
	}
	if !decide("k1") {
		t.Error(`first request with key "k1" rejected, want admitted: its scope has its own budget`)
	}
	if decide("k1") {
		t.Error(`second request with key "k1" admitted, want rejected`)
	}
}
