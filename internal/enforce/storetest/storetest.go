// Package storetest is the contract every enforce.Store keeps: Run drives a
// store (or a wrapper around one) through one table of decisions on a
// controlled clock, so the memory and Redis stores, failover, regions and
// traffic recording are held to the same figures.
package storetest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/testenv"
)

// epoch is where every controlled clock starts: a multiple of every window
// used below, so window boundaries fall on round offsets.
var Epoch = time.Unix(1_800_000_000, 0)

// fakeClock is a controlled clock shared by a store and its test.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

func NewClock() *Clock { return &Clock{t: Epoch} }

func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// newTestRedis returns a client of the test Redis and a key prefix unique to
// the test; testenv deletes the prefix's keys when the test ends.
func Redis(t testing.TB) (redis.UniversalClient, string) {
	t.Helper()
	return testenv.Redis(t)
}

// newInstanceClient returns a second, independent client of the test Redis,
// standing in for another portal instance.
func InstanceClient(t testing.TB) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(testenv.RedisURL(t))
	if err != nil {
		t.Fatalf("parse Redis URL: %v", err)
	}
	client := redis.NewClient(opts)
	t.Cleanup(func() { client.Close() })
	return client
}

// storeKind builds a store over a controlled clock.
type Kind struct {
	Name string
	New  func(t *testing.T, clock *Clock) enforce.Store
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
	edit    []enforce.Limit
	allowed bool
	delay   time.Duration
	layers  []wantLayer
}

type storeCase struct {
	Name   string
	limits []enforce.Limit
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
	tb := enforce.Limit{Name: "seed", Algorithm: enforce.TokenBucket, Limit: 2, Window: time.Second, Burst: 10}
	fw := enforce.Limit{Name: "fw", Algorithm: enforce.FixedWindow, Limit: 5, Window: 10 * time.Second}
	swl := enforce.Limit{Name: "log", Algorithm: enforce.SlidingWindowLog, Limit: 5, Window: 10 * time.Second}
	swc := enforce.Limit{Name: "swc", Algorithm: enforce.SlidingWindowCounter, Limit: 100, Window: time.Minute}
	lbQueue := enforce.Limit{Name: "shape", Algorithm: enforce.LeakyBucket, Limit: 2, Window: time.Second, Burst: 2, Mode: enforce.ModeQueue}
	lbReject := lbQueue
	lbReject.Mode = enforce.ModeReject
	small := enforce.Limit{Name: "small", Algorithm: enforce.FixedWindow, Limit: 1, Window: 10 * time.Second}
	big := enforce.Limit{Name: "big", Algorithm: enforce.TokenBucket, Limit: 10, Window: 10 * time.Second}
	pair := enforce.Limit{Name: "pair", Algorithm: enforce.FixedWindow, Limit: 2, Window: 10 * time.Second}
	tbCost := enforce.Limit{Name: "cost", Algorithm: enforce.TokenBucket, Limit: 10, Window: time.Second, Cost: 4}
	fwCost := enforce.Limit{Name: "fwcost", Algorithm: enforce.FixedWindow, Limit: 10, Window: time.Minute, Cost: 3}
	shadowFW := enforce.Limit{Name: "dark", Algorithm: enforce.FixedWindow, Limit: 1, Window: 10 * time.Second, Mode: enforce.ModeShadow}
	enforced := enforce.Limit{Name: "lit", Algorithm: enforce.FixedWindow, Limit: 2, Window: 10 * time.Second}
	shadowTB := enforce.Limit{Name: "darktb", Algorithm: enforce.TokenBucket, Limit: 2, Window: time.Second, Burst: 1, Mode: enforce.ModeShadow}
	var seedResets []time.Duration
	for i := 1; i <= 10; i++ {
		seedResets = append(seedResets, time.Duration(i)*500*ms)
	}
	return []storeCase{
		{
			Name:   "TokenBucketSeedExample",
			limits: []enforce.Limit{tb},
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
			Name:   "FixedWindowAdmitsTwiceTheLimitAcrossABoundary",
			limits: []enforce.Limit{fw},
			steps: cat(
				admits(9*time.Second, 4, repeat(5, time.Second)...),
				[]step{{at: 9 * time.Second, layers: []wantLayer{{false, 0, time.Second, time.Second}}}},
				admits(10*time.Second, 4, repeat(5, 10*time.Second)...),
				[]step{{at: 10 * time.Second, layers: []wantLayer{{false, 0, 10 * time.Second, 10 * time.Second}}}},
			),
		},
		{
			Name:   "SlidingLogHasNoBoundaryBurst",
			limits: []enforce.Limit{swl},
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
			Name:   "SlidingLogRetriesWhenTheOldestEntryLeaves",
			limits: []enforce.Limit{swl},
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
			Name:   "SlidingCounterWeightsPreviousWindowByItsRemainingShare",
			limits: []enforce.Limit{swc},
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
			Name:   "TokenBucketCostAboveOne",
			limits: []enforce.Limit{tbCost},
			steps: []step{
				{at: 0, allowed: true, layers: []wantLayer{{true, 6, 400 * ms, 0}}},
				{at: 0, allowed: true, layers: []wantLayer{{true, 2, 800 * ms, 0}}},
				{at: 0, layers: []wantLayer{{false, 2, 800 * ms, 200 * ms}}},
				{at: 200 * ms, allowed: true, layers: []wantLayer{{true, 0, time.Second, 0}}},
			},
		},
		{
			Name:   "FixedWindowCostAboveOne",
			limits: []enforce.Limit{fwCost},
			steps: []step{
				{at: 0, allowed: true, layers: []wantLayer{{true, 7, time.Minute, 0}}},
				{at: 0, allowed: true, layers: []wantLayer{{true, 4, time.Minute, 0}}},
				{at: 30 * time.Second, allowed: true, layers: []wantLayer{{true, 1, 30 * time.Second, 0}}},
				{at: 30 * time.Second, layers: []wantLayer{{false, 1, 30 * time.Second, 30 * time.Second}}},
				{at: 30 * time.Second, cost: 1, allowed: true, layers: []wantLayer{{true, 0, 30 * time.Second, 0}}},
			},
		},
		{
			Name:   "LeakyBucketQueuesThenRejectsWhenTheQueueIsFull",
			limits: []enforce.Limit{lbQueue},
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
			Name:   "LeakyBucketInRejectModePolicesWithoutDelay",
			limits: []enforce.Limit{lbReject},
			steps: []step{
				{at: 0, allowed: true, layers: []wantLayer{{true, 2, 500 * ms, 0}}},
				{at: 0, allowed: true, layers: []wantLayer{{true, 1, time.Second, 0}}},
				{at: 0, allowed: true, layers: []wantLayer{{true, 0, 1500 * ms, 0}}},
				{at: 0, layers: []wantLayer{{false, 0, 1500 * ms, 500 * ms}}},
			},
		},
		{
			Name:   "RejectionByOneLayerConsumesNothingFromTheOthers",
			limits: []enforce.Limit{small, big},
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
			Name:   "QueueDelayBesideOtherLayers",
			limits: []enforce.Limit{lbQueue, big, pair},
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
			Name:   "ShadowLimitNeverRejects",
			limits: []enforce.Limit{shadowFW},
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
			Name:   "ShadowBesideAnEnforcedLimit",
			limits: []enforce.Limit{enforced, shadowTB},
			steps: []step{
				{at: 0, allowed: true, layers: []wantLayer{{true, 1, 10 * time.Second, 0}, {true, 0, 500 * ms, 0}}},
				{at: 0, allowed: true, layers: []wantLayer{{true, 0, 10 * time.Second, 0}, {false, 0, 500 * ms, 500 * ms}}},
				{at: 500 * ms, layers: []wantLayer{{false, 0, 9500 * ms, 9500 * ms}, {true, 1, 0, 0}}},
				{at: 10 * time.Second, allowed: true, layers: []wantLayer{{true, 1, 10 * time.Second, 0}, {true, 0, 500 * ms, 0}}},
			},
		},
		{
			Name:   "PeekConsumesNothing",
			limits: []enforce.Limit{tb},
			steps: []step{
				{at: 0, peek: true, allowed: true, layers: []wantLayer{{true, 10, 0, 0}}},
				{at: 0, peek: true, allowed: true, layers: []wantLayer{{true, 10, 0, 0}}},
				{at: 0, allowed: true, layers: []wantLayer{{true, 9, 500 * ms, 0}}},
				{at: 0, peek: true, allowed: true, layers: []wantLayer{{true, 9, 500 * ms, 0}}},
			},
		},
	}
}

func testStoresAgreeOnEveryAlgorithm(t *testing.T, kinds []Kind) {
	for _, kind := range kinds {
		t.Run(kind.Name, func(t *testing.T) {
			for _, tc := range storeCases() {
				t.Run(tc.Name, func(t *testing.T) {
					clock := NewClock()
					store := kind.New(t, clock)
					runSteps(t, store, clock, "subject:"+tc.Name, tc.limits, tc.steps)
				})
			}
		})
	}
}

func runSteps(t *testing.T, store enforce.Store, clock *Clock, subject string, limits []enforce.Limit, steps []step) {
	t.Helper()
	runAnchoredSteps(t, store, clock, subject, time.Time{}, limits, steps)
}

// runAnchoredSteps is runSteps for a subject whose quotas renew at anchor.
func runAnchoredSteps(t *testing.T, store enforce.Store, clock *Clock, subject string, anchor time.Time, limits []enforce.Limit, steps []step) {
	t.Helper()
	ctx := context.Background()
	for i, st := range steps {
		clock.Set(Epoch.Add(st.at))
		if st.edit != nil {
			limits = st.edit
		}
		ls := limits
		if st.cost != 0 {
			ls = make([]enforce.Limit, len(limits))
			for j, l := range limits {
				l.Cost = st.cost
				ls[j] = l
			}
		}
		req := enforce.Request{Subject: subject, Route: "GET /test", Limits: ls, Anchor: anchor}
		var d enforce.Decision
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
		if want := Epoch.Add(st.at); !d.At.Equal(want) {
			t.Errorf("step %d: At=%s, want %s", i, d.At.UTC(), want.UTC())
		}
		for j, w := range st.layers {
			got := d.Layers[j]
			want := enforce.LayerResult{Limit: ls[j], Allowed: w.allowed, Remaining: w.remaining, ResetAfter: w.reset, RetryAfter: w.retry}
			if ls[j].Algorithm == enforce.Quota {
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

// Run runs the contract every Store keeps (every algorithm's figures, limit
// edits, quotas, per-key state, refused requests, usage counts) against each
// kind of store.
func Run(t *testing.T, kinds ...Kind) {
	t.Run("StoresAgreeOnEveryAlgorithm", func(t *testing.T) { testStoresAgreeOnEveryAlgorithm(t, kinds) })
	t.Run("StoresRescaleEditedLimits", func(t *testing.T) { testStoresRescaleEditedLimits(t, kinds) })
	t.Run("StoresAgreeOnQuotas", func(t *testing.T) { testStoresAgreeOnQuotas(t, kinds) })
	t.Run("StoresAgreeOnQuotaGrantsAndResets", func(t *testing.T) { testStoresAgreeOnQuotaGrantsAndResets(t, kinds) })
	t.Run("KeysOfOneDeveloperShareThePlanWideLimit", func(t *testing.T) { testKeysOfOneDeveloperShareThePlanWideLimit(t, kinds) })
	t.Run("StoresRefuseABracedKey", func(t *testing.T) { testStoresRefuseABracedKey(t, kinds) })
	t.Run("TokenBucketMatchesXTimeRate", func(t *testing.T) { testTokenBucketMatchesXTimeRate(t, kinds) })
	t.Run("SlidingLogMatchesBruteForce", func(t *testing.T) { testSlidingLogMatchesBruteForce(t, kinds) })
	t.Run("StoresRejectInvalidRequests", func(t *testing.T) { testStoresRejectInvalidRequests(t, kinds) })
	t.Run("StoresCountUsage", func(t *testing.T) { testStoresCountUsage(t, kinds) })
	t.Run("StoresAgreeOnRefunds", func(t *testing.T) { testStoresAgreeOnRefunds(t, kinds) })
}
