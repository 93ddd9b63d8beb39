package enforce

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/testenv"
)

// epoch is where every controlled clock starts: a multiple of every window
// used below, so window boundaries fall on round offsets.
var epoch = time.Unix(1_800_000_000, 0)

// fakeClock is a controlled clock shared by a store and its test.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: epoch} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// newTestRedis returns a client of the test Redis and a key prefix unique to
// the test; testenv deletes the prefix's keys when the test ends.
func newTestRedis(t testing.TB) (redis.UniversalClient, string) {
	t.Helper()
	return testenv.Redis(t)
}

// newInstanceClient returns a second, independent client of the test Redis,
// standing in for another portal instance.
func newInstanceClient(t testing.TB) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(testenv.RedisURL(t))
	if err != nil {
		t.Fatalf("parse Redis URL: %v", err)
	}
	client := redis.NewClient(opts)
	t.Cleanup(func() { client.Close() })
	return client
}

func newTestRedisStore(t testing.TB, client redis.UniversalClient, opts RedisOptions) *RedisStore {
	t.Helper()
	s, err := NewRedisStore(client, opts)
	if err != nil {
		t.Fatalf("NewRedisStore: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// storeKind builds a store over a controlled clock.
type storeKind struct {
	name string
	new  func(t *testing.T, clock *fakeClock) Store
}

func storeKinds() []storeKind {
	return []storeKind{
		{"Memory", func(t *testing.T, clock *fakeClock) Store {
			return NewMemoryStore(MemoryOptions{Now: clock.Now})
		}},
		{"Redis", func(t *testing.T, clock *fakeClock) Store {
			client, prefix := newTestRedis(t)
			return newTestRedisStore(t, client, RedisOptions{Prefix: prefix, Now: clock.Now, Timeout: 2 * time.Second})
		}},
	}
}

type wantLayer struct {
	allowed   bool
	remaining int64
	reset     time.Duration
	retry     time.Duration
}

// step is one request of a case, at an offset from epoch.
type step struct {
	at   time.Duration
	peek bool
	cost int64 // overrides every limit's Cost when set
	// edit replaces the case's limits from this step on, as a plan edit
	// replaces a tier in place (same names).
	edit    []Limit
	allowed bool
	delay   time.Duration
	layers  []wantLayer
}

type storeCase struct {
	name   string
	limits []Limit
	steps  []step
}

const ms = time.Millisecond

// admits returns n admitted single-layer steps at the same instant, with
// remaining counting down from first and the given reset for each.
func admits(at time.Duration, first int64, resets ...time.Duration) []step {
	steps := make([]step, len(resets))
	for i, reset := range resets {
		steps[i] = step{at: at, allowed: true, layers: []wantLayer{{true, first - int64(i), reset, 0}}}
	}
	return steps
}

func repeat(n int, d time.Duration) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = d
	}
	return out
}

func cat(parts ...[]step) []step {
	var out []step
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func storeCases() []storeCase {
	tb := Limit{Name: "seed", Algorithm: TokenBucket, Limit: 2, Window: time.Second, Burst: 10}
	fw := Limit{Name: "fw", Algorithm: FixedWindow, Limit: 5, Window: 10 * time.Second}
	swl := Limit{Name: "log", Algorithm: SlidingWindowLog, Limit: 5, Window: 10 * time.Second}
	swc := Limit{Name: "swc", Algorithm: SlidingWindowCounter, Limit: 100, Window: time.Minute}
	lbQueue := Limit{Name: "shape", Algorithm: LeakyBucket, Limit: 2, Window: time.Second, Burst: 2, Mode: ModeQueue}
	lbReject := lbQueue
	lbReject.Mode = ModeReject
	small := Limit{Name: "small", Algorithm: FixedWindow, Limit: 1, Window: 10 * time.Second}
	big := Limit{Name: "big", Algorithm: TokenBucket, Limit: 10, Window: 10 * time.Second}
	pair := Limit{Name: "pair", Algorithm: FixedWindow, Limit: 2, Window: 10 * time.Second}
	tbCost := Limit{Name: "cost", Algorithm: TokenBucket, Limit: 10, Window: time.Second, Cost: 4}
	fwCost := Limit{Name: "fwcost", Algorithm: FixedWindow, Limit: 10, Window: time.Minute, Cost: 3}
	shadowFW := Limit{Name: "dark", Algorithm: FixedWindow, Limit: 1, Window: 10 * time.Second, Mode: ModeShadow}
	enforced := Limit{Name: "lit", Algorithm: FixedWindow, Limit: 2, Window: 10 * time.Second}
	shadowTB := Limit{Name: "darktb", Algorithm: TokenBucket, Limit: 2, Window: time.Second, Burst: 1, Mode: ModeShadow}
	var seedResets []time.Duration
	for i := 1; i <= 10; i++ {
		seedResets = append(seedResets, time.Duration(i)*500*ms)
	}
	return []storeCase{
		{
			name:   "TokenBucketSeedExample",
			limits: []Limit{tb},
			steps: cat(
				admits(0, 9, seedResets...),
				[]step{
					{at: 0, layers: []wantLayer{{false, 0, 5 * time.Second, 500 * ms}}},
					{at: 500 * ms, allowed: true, layers: []wantLayer{{true, 0, 5 * time.Second, 0}}},
					{at: 500 * ms, layers: []wantLayer{{false, 0, 5 * time.Second, 500 * ms}}},
				},
			),
		},
		{
			name:   "FixedWindowAdmitsTwiceTheLimitAcrossABoundary",
			limits: []Limit{fw},
			steps: cat(
				admits(9*time.Second, 4, repeat(5, time.Second)...),
				[]step{{at: 9 * time.Second, layers: []wantLayer{{false, 0, time.Second, time.Second}}}},
				admits(10*time.Second, 4, repeat(5, 10*time.Second)...),
				[]step{{at: 10 * time.Second, layers: []wantLayer{{false, 0, 10 * time.Second, 10 * time.Second}}}},
			),
		},
		{
			name:   "SlidingLogHasNoBoundaryBurst",
			limits: []Limit{swl},
			steps: cat(
				admits(9*time.Second, 4, repeat(5, 10*time.Second)...),
				[]step{
					{at: 9 * time.Second, layers: []wantLayer{{false, 0, 10 * time.Second, 10 * time.Second}}},
					{at: 10 * time.Second, layers: []wantLayer{{false, 0, 9 * time.Second, 9 * time.Second}}},
					{at: 19 * time.Second, allowed: true, layers: []wantLayer{{true, 4, 10 * time.Second, 0}}},
				},
			),
		},
		{
			name:   "SlidingLogRetriesWhenTheOldestEntryLeaves",
			limits: []Limit{swl},
			steps: cat(
				admits(0, 4, 10*time.Second, 10*time.Second),
				admits(5*time.Second, 2, 10*time.Second, 10*time.Second, 10*time.Second),
				[]step{
					{at: 9500 * ms, layers: []wantLayer{{false, 0, 5500 * ms, 500 * ms}}},
					{at: 10 * time.Second, allowed: true, layers: []wantLayer{{true, 1, 10 * time.Second, 0}}},
					{at: 10 * time.Second, allowed: true, layers: []wantLayer{{true, 0, 10 * time.Second, 0}}},
					{at: 10 * time.Second, layers: []wantLayer{{false, 0, 10 * time.Second, 5 * time.Second}}},
				},
			),
		},
		{
			name:   "SlidingCounterWeightsPreviousWindowByItsRemainingShare",
			limits: []Limit{swc},
			steps: []step{
				{at: 10 * time.Second, cost: 80, allowed: true, layers: []wantLayer{{true, 20, 110 * time.Second, 0}}},
				// Second 45 of the next window: 80 * 15/60 = 20 still count.
				{at: 105 * time.Second, peek: true, allowed: true, layers: []wantLayer{{true, 80, 15 * time.Second, 0}}},
				{at: 105 * time.Second, cost: 80, allowed: true, layers: []wantLayer{{true, 0, 75 * time.Second, 0}}},
				// 80*(60-e)/60 + 80 + 1 <= 100 once e >= 45.75 s.
				{at: 105 * time.Second, layers: []wantLayer{{false, 0, 75 * time.Second, 750 * ms}}},
			},
		},
		{
			name:   "TokenBucketCostAboveOne",
			limits: []Limit{tbCost},
			steps: []step{
				{at: 0, allowed: true, layers: []wantLayer{{true, 6, 400 * ms, 0}}},
				{at: 0, allowed: true, layers: []wantLayer{{true, 2, 800 * ms, 0}}},
				{at: 0, layers: []wantLayer{{false, 2, 800 * ms, 200 * ms}}},
				{at: 200 * ms, allowed: true, layers: []wantLayer{{true, 0, time.Second, 0}}},
			},
		},
		{
			name:   "FixedWindowCostAboveOne",
			limits: []Limit{fwCost},
			steps: []step{
				{at: 0, allowed: true, layers: []wantLayer{{true, 7, time.Minute, 0}}},
				{at: 0, allowed: true, layers: []wantLayer{{true, 4, time.Minute, 0}}},
				{at: 30 * time.Second, allowed: true, layers: []wantLayer{{true, 1, 30 * time.Second, 0}}},
				{at: 30 * time.Second, layers: []wantLayer{{false, 1, 30 * time.Second, 30 * time.Second}}},
				{at: 30 * time.Second, cost: 1, allowed: true, layers: []wantLayer{{true, 0, 30 * time.Second, 0}}},
			},
		},
		{
			name:   "LeakyBucketQueuesThenRejectsWhenTheQueueIsFull",
			limits: []Limit{lbQueue},
			steps: []step{
				{at: 0, allowed: true, layers: []wantLayer{{true, 2, 500 * ms, 0}}},
				{at: 0, allowed: true, delay: 500 * ms, layers: []wantLayer{{true, 1, time.Second, 0}}},
				{at: 0, allowed: true, delay: time.Second, layers: []wantLayer{{true, 0, 1500 * ms, 0}}},
				{at: 0, layers: []wantLayer{{false, 0, 1500 * ms, 500 * ms}}},
				{at: 500 * ms, allowed: true, delay: time.Second, layers: []wantLayer{{true, 0, 1500 * ms, 0}}},
				{at: 3 * time.Second, peek: true, allowed: true, layers: []wantLayer{{true, 3, 0, 0}}},
			},
		},
		{
			name:   "LeakyBucketInRejectModePolicesWithoutDelay",
			limits: []Limit{lbReject},
			steps: []step{
				{at: 0, allowed: true, layers: []wantLayer{{true, 2, 500 * ms, 0}}},
				{at: 0, allowed: true, layers: []wantLayer{{true, 1, time.Second, 0}}},
				{at: 0, allowed: true, layers: []wantLayer{{true, 0, 1500 * ms, 0}}},
				{at: 0, layers: []wantLayer{{false, 0, 1500 * ms, 500 * ms}}},
			},
		},
		{
			name:   "RejectionByOneLayerConsumesNothingFromTheOthers",
			limits: []Limit{small, big},
			steps: []step{
				{at: 0, allowed: true, layers: []wantLayer{{true, 0, 10 * time.Second, 0}, {true, 9, time.Second, 0}}},
				{at: 0, layers: []wantLayer{{false, 0, 10 * time.Second, 10 * time.Second}, {true, 9, time.Second, 0}}},
				{at: 0, layers: []wantLayer{{false, 0, 10 * time.Second, 10 * time.Second}, {true, 9, time.Second, 0}}},
				{at: 0, peek: true, layers: []wantLayer{{false, 0, 10 * time.Second, 10 * time.Second}, {true, 9, time.Second, 0}}},
			},
		},
		{
			// A queueing layer's delay beside counters decided in one pass
			// (decide.lua's path for several counter limits): reported when
			// every layer admits, 0 and nothing consumed when one rejects.
			name:   "QueueDelayBesideOtherLayers",
			limits: []Limit{lbQueue, big, pair},
			steps: []step{
				{at: 0, allowed: true, layers: []wantLayer{{true, 2, 500 * ms, 0}, {true, 9, time.Second, 0}, {true, 1, 10 * time.Second, 0}}},
				{at: 0, allowed: true, delay: 500 * ms, layers: []wantLayer{{true, 1, time.Second, 0}, {true, 8, 2 * time.Second, 0}, {true, 0, 10 * time.Second, 0}}},
				{at: 0, layers: []wantLayer{{true, 1, time.Second, 0}, {true, 8, 2 * time.Second, 0}, {false, 0, 10 * time.Second, 10 * time.Second}}},
				{at: 10 * time.Second, allowed: true, layers: []wantLayer{{true, 2, 500 * ms, 0}, {true, 9, time.Second, 0}, {true, 1, 10 * time.Second, 0}}},
			},
		},
		{
			// Limit 1 in the dark: never rejects, and consumes only what
			// it admits, so it reports every request past the first.
			name:   "ShadowLimitNeverRejects",
			limits: []Limit{shadowFW},
			steps: []step{
				{at: 0, allowed: true, layers: []wantLayer{{true, 0, 10 * time.Second, 0}}},
				{at: 0, allowed: true, layers: []wantLayer{{false, 0, 10 * time.Second, 10 * time.Second}}},
				{at: 5 * time.Second, allowed: true, layers: []wantLayer{{false, 0, 5 * time.Second, 5 * time.Second}}},
				{at: 10 * time.Second, allowed: true, layers: []wantLayer{{true, 0, 10 * time.Second, 0}}},
			},
		},
		{
			// Beside an enforced limit: the enforced one alone decides, and
			// a request it rejects consumes nothing from the shadow one.
			name:   "ShadowBesideAnEnforcedLimit",
			limits: []Limit{enforced, shadowTB},
			steps: []step{
				{at: 0, allowed: true, layers: []wantLayer{{true, 1, 10 * time.Second, 0}, {true, 0, 500 * ms, 0}}},
				{at: 0, allowed: true, layers: []wantLayer{{true, 0, 10 * time.Second, 0}, {false, 0, 500 * ms, 500 * ms}}},
				{at: 500 * ms, layers: []wantLayer{{false, 0, 9500 * ms, 9500 * ms}, {true, 1, 0, 0}}},
				{at: 10 * time.Second, allowed: true, layers: []wantLayer{{true, 1, 10 * time.Second, 0}, {true, 0, 500 * ms, 0}}},
			},
		},
		{
			name:   "PeekConsumesNothing",
			limits: []Limit{tb},
			steps: []step{
				{at: 0, peek: true, allowed: true, layers: []wantLayer{{true, 10, 0, 0}}},
				{at: 0, peek: true, allowed: true, layers: []wantLayer{{true, 10, 0, 0}}},
				{at: 0, allowed: true, layers: []wantLayer{{true, 9, 500 * ms, 0}}},
				{at: 0, peek: true, allowed: true, layers: []wantLayer{{true, 9, 500 * ms, 0}}},
			},
		},
	}
}

func TestStoresAgreeOnEveryAlgorithm(t *testing.T) {
	for _, kind := range storeKinds() {
		t.Run(kind.name, func(t *testing.T) {
			for _, tc := range storeCases() {
				t.Run(tc.name, func(t *testing.T) {
					clock := newFakeClock()
					store := kind.new(t, clock)
					runSteps(t, store, clock, "subject:"+tc.name, tc.limits, tc.steps)
				})
			}
		})
	}
}

func runSteps(t *testing.T, store Store, clock *fakeClock, subject string, limits []Limit, steps []step) {
	t.Helper()
	runAnchoredSteps(t, store, clock, subject, time.Time{}, limits, steps)
}

// runAnchoredSteps is runSteps for a subject whose quotas renew at anchor.
func runAnchoredSteps(t *testing.T, store Store, clock *fakeClock, subject string, anchor time.Time, limits []Limit, steps []step) {
	t.Helper()
	ctx := context.Background()
	for i, st := range steps {
		clock.Set(epoch.Add(st.at))
		if st.edit != nil {
			limits = st.edit
		}
		ls := limits
		if st.cost != 0 {
			ls = make([]Limit, len(limits))
			for j, l := range limits {
				l.Cost = st.cost
				ls[j] = l
			}
		}
		req := Request{Subject: subject, Route: "GET /test", Limits: ls, Anchor: anchor}
		var d Decision
		var err error
		if st.peek {
			d, err = store.Peek(ctx, req)
		} else {
			d, err = store.Allow(ctx, req)
		}
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if d.Allowed != st.allowed || d.Delay != st.delay || len(d.Layers) != len(st.layers) {
			t.Fatalf("step %d at %s: Allowed=%v Delay=%s layers=%d, want Allowed=%v Delay=%s layers=%d",
				i, st.at, d.Allowed, d.Delay, len(d.Layers), st.allowed, st.delay, len(st.layers))
		}
		// both stores report the clock they decided by, so reset times
		// computed from At are the store's, not the caller's
		if want := epoch.Add(st.at); !d.At.Equal(want) {
			t.Errorf("step %d: At=%s, want %s", i, d.At.UTC(), want.UTC())
		}
		for j, w := range st.layers {
			got := d.Layers[j]
			want := LayerResult{Limit: ls[j], Allowed: w.allowed, Remaining: w.remaining, ResetAfter: w.reset, RetryAfter: w.retry}
			if ls[j].Algorithm == Quota {
				// The period's length is TestPeriodBounds's; here it must
				// be there, and hold the reset.
				if got.Period < got.ResetAfter || got.Period <= 0 {
					t.Errorf("step %d layer %q: Period %s, want one holding the reset %s", i, ls[j].Name, got.Period, got.ResetAfter)
				}
				want.Period = got.Period
			}
			if got != want {
				t.Errorf("step %d at %s layer %q:\n got Allowed=%v Remaining=%d ResetAfter=%s RetryAfter=%s\nwant Allowed=%v Remaining=%d ResetAfter=%s RetryAfter=%s",
					i, st.at, ls[j].Name, got.Allowed, got.Remaining, got.ResetAfter, got.RetryAfter,
					want.Allowed, want.Remaining, want.ResetAfter, want.RetryAfter)
			}
		}
	}
}
