package storetest

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
)

// rescaleCases are edits of a limit in place (same name, other figures):
// each takes effect at the next request, raising admits at once, lowering
// rejects at once, and neither waits for a window or arrival time of the old
// figures.
func rescaleCases() []storeCase {
	const s = time.Second
	fw := func(limit int64, window time.Duration) []enforce.Limit {
		return []enforce.Limit{{Name: "fw", Algorithm: enforce.FixedWindow, Limit: limit, Window: window}}
	}
	swc := func(limit int64) []enforce.Limit {
		return []enforce.Limit{{Name: "swc", Algorithm: enforce.SlidingWindowCounter, Limit: limit, Window: time.Minute}}
	}
	swl := func(limit int64, window time.Duration) []enforce.Limit {
		return []enforce.Limit{{Name: "log", Algorithm: enforce.SlidingWindowLog, Limit: limit, Window: window}}
	}
	tb := func(limit int64, window time.Duration, burst int64) []enforce.Limit {
		return []enforce.Limit{{Name: "tb", Algorithm: enforce.TokenBucket, Limit: limit, Window: window, Burst: burst}}
	}
	lb := func(limit, burst int64) []enforce.Limit {
		return []enforce.Limit{{Name: "lb", Algorithm: enforce.LeakyBucket, Limit: limit, Window: s, Burst: burst}}
	}
	two := func(a int64) []enforce.Limit {
		return []enforce.Limit{
			{Name: "a", Algorithm: enforce.FixedWindow, Limit: a, Window: 10 * s},
			{Name: "b", Algorithm: enforce.TokenBucket, Limit: 10, Window: 10 * s},
		}
	}
	lbThree := []step{
		{at: 0, allowed: true, layers: []wantLayer{{true, 2, 500 * ms, 0}}},
		{at: 0, allowed: true, layers: []wantLayer{{true, 1, s, 0}}},
		{at: 0, allowed: true, layers: []wantLayer{{true, 0, 1500 * ms, 0}}},
	}
	return []storeCase{
		{
			Name: "FixedWindowRaisedLimitAdmitsAtOnce", limits: fw(2, 10*s),
			steps: cat(admits(0, 1, 10*s, 10*s), []step{
				{at: 0, layers: []wantLayer{{false, 0, 10 * s, 10 * s}}},
				{at: s, edit: fw(4, 10*s), allowed: true, layers: []wantLayer{{true, 1, 9 * s, 0}}},
				{at: s, allowed: true, layers: []wantLayer{{true, 0, 9 * s, 0}}},
				{at: s, layers: []wantLayer{{false, 0, 9 * s, 9 * s}}},
			}),
		},
		{
			Name: "FixedWindowLoweredLimitBitesAtOnce", limits: fw(5, 10*s),
			steps: cat(admits(0, 4, 10*s, 10*s, 10*s), []step{
				{at: s, edit: fw(3, 10*s), layers: []wantLayer{{false, 0, 9 * s, 9 * s}}},
				{at: 10 * s, allowed: true, layers: []wantLayer{{true, 2, 10 * s, 0}}},
			}),
		},
		{
			// What the current window counted carries into the window of
			// the new size that holds now.
			Name: "FixedWindowLongerWindowKeepsWhatWasSpent", limits: fw(3, 10*s),
			steps: cat(admits(0, 2, 10*s, 10*s), []step{
				{at: s, edit: fw(3, time.Minute), allowed: true, layers: []wantLayer{{true, 0, 59 * s, 0}}},
				{at: s, layers: []wantLayer{{false, 0, 59 * s, 59 * s}}},
			}),
		},
		{
			// A count whose window ended under the old size is not
			// mistaken for one of the new size.
			Name: "FixedWindowEndedCountIsNotCarried", limits: fw(1, s),
			steps: cat(admits(0, 0, s), []step{
				{at: 2 * s, edit: fw(1, time.Hour), allowed: true, layers: []wantLayer{{true, 0, time.Hour - 2*s, 0}}},
				{at: 4 * s, edit: fw(1, s), layers: []wantLayer{{false, 0, s, s}}},
				{at: 5 * s, allowed: true, layers: []wantLayer{{true, 0, s, 0}}},
			}),
		},
		{
			Name: "SlidingCounterRaisedLimitAdmitsAtOnce", limits: swc(10),
			steps: []step{
				{at: 0, cost: 10, allowed: true, layers: []wantLayer{{true, 0, 2 * time.Minute, 0}}},
				{at: 30 * s, layers: []wantLayer{{false, 0, 90 * s, 36 * s}}},
				{at: 30 * s, edit: swc(20), allowed: true, layers: []wantLayer{{true, 9, 90 * s, 0}}},
			},
		},
		{
			Name: "SlidingCounterLoweredLimitBitesAtOnce", limits: swc(10),
			steps: []step{
				{at: 0, cost: 8, allowed: true, layers: []wantLayer{{true, 2, 2 * time.Minute, 0}}},
				// 8 spent of 5: the next window, where 8*(60-e)/60 + 1 <= 5
				// once e >= 30 s.
				{at: 30 * s, edit: swc(5), layers: []wantLayer{{false, 0, 90 * s, 60 * s}}},
				{at: 90 * s, allowed: true, layers: []wantLayer{{true, 0, 90 * s, 0}}},
			},
		},
		{
			Name: "SlidingLogRaisedAndLoweredLimit", limits: swl(5, 10*s),
			steps: cat(admits(0, 4, 10*s, 10*s, 10*s), []step{
				{at: s, edit: swl(3, 10*s), layers: []wantLayer{{false, 0, 9 * s, 9 * s}}},
				{at: s, edit: swl(4, 10*s), allowed: true, layers: []wantLayer{{true, 0, 10 * s, 0}}},
				// A shorter window: the three requests at 0 still count in
				// (1-5, 1], beside the one at 1.
				{at: 2 * s, edit: swl(5, 5*s), allowed: true, layers: []wantLayer{{true, 0, 5 * s, 0}}},
				{at: 5 * s, allowed: true, layers: []wantLayer{{true, 2, 5 * s, 0}}},
			}),
		},
		{
			// Ten spent of 10 per 10 s; at 10 per second the debt of ten is
			// repaid in one second, not the old ten.
			Name: "TokenBucketFasterRateRepaysAtTheNewRate", limits: tb(10, 10*s, 10),
			steps: []step{
				{at: 0, cost: 10, allowed: true, layers: []wantLayer{{true, 0, 10 * s, 0}}},
				{at: 0, edit: tb(10, s, 10), layers: []wantLayer{{false, 0, s, 100 * ms}}},
				{at: 100 * ms, allowed: true, layers: []wantLayer{{true, 0, s, 0}}},
			},
		},
		{
			Name: "TokenBucketRaisedBurstAdmitsAtOnce", limits: tb(10, 10*s, 10),
			steps: []step{
				{at: 0, cost: 10, allowed: true, layers: []wantLayer{{true, 0, 10 * s, 0}}},
				{at: 0, layers: []wantLayer{{false, 0, 10 * s, s}}},
				{at: 0, edit: tb(10, 10*s, 20), allowed: true, layers: []wantLayer{{true, 9, 11 * s, 0}}},
			},
		},
		{
			Name: "TokenBucketLoweredBurstBitesAtOnce", limits: tb(10, 10*s, 10),
			steps: []step{
				{at: 0, cost: 5, allowed: true, layers: []wantLayer{{true, 5, 5 * s, 0}}},
				{at: 0, edit: tb(10, 10*s, 4), layers: []wantLayer{{false, 0, 5 * s, 2 * s}}},
				{at: 2 * s, allowed: true, layers: []wantLayer{{true, 0, 4 * s, 0}}},
			},
		},
		{
			Name: "LeakyBucketDeeperQueueAdmitsAtOnce", limits: lb(2, 2),
			steps: cat(lbThree, []step{
				{at: 0, layers: []wantLayer{{false, 0, 1500 * ms, 500 * ms}}},
				{at: 0, edit: lb(2, 4), allowed: true, layers: []wantLayer{{true, 1, 2 * s, 0}}},
			}),
		},
		{
			Name: "LeakyBucketShallowerQueueBitesAtOnce", limits: lb(2, 2),
			steps: cat(lbThree, []step{
				{at: 0, edit: lb(2, 1), layers: []wantLayer{{false, 0, 1500 * ms, s}}},
			}),
		},
		{
			// Three queued at 2 per second is 1.5 s of queue; at 4 per
			// second the same three take 0.75 s.
			Name: "LeakyBucketFasterRateDrainsAtTheNewRate", limits: lb(2, 2),
			steps: cat(lbThree, []step{
				{at: 0, edit: lb(4, 2), layers: []wantLayer{{false, 0, 750 * ms, 250 * ms}}},
				{at: 250 * ms, allowed: true, layers: []wantLayer{{true, 0, 750 * ms, 0}}},
			}),
		},
		{
			Name: "AnotherAlgorithmStartsAfresh", limits: fw(2, 10*s),
			steps: cat(admits(0, 1, 10*s, 10*s), []step{
				{at: 0, edit: []enforce.Limit{{Name: "fw", Algorithm: enforce.TokenBucket, Limit: 2, Window: 10 * s}}, allowed: true, layers: []wantLayer{{true, 1, 5 * s, 0}}},
				{at: 0, edit: fw(2, 10*s), allowed: true, layers: []wantLayer{{true, 1, 10 * s, 0}}},
			}),
		},
		{
			// Two layers decided together: the edited one rescales, the
			// other keeps its state, and a rejection writes neither.
			Name: "OneOfTwoLayersEdited", limits: two(5),
			steps: []step{
				{at: 0, allowed: true, layers: []wantLayer{{true, 4, 10 * s, 0}, {true, 9, s, 0}}},
				{at: 0, allowed: true, layers: []wantLayer{{true, 3, 10 * s, 0}, {true, 8, 2 * s, 0}}},
				{at: 0, allowed: true, layers: []wantLayer{{true, 2, 10 * s, 0}, {true, 7, 3 * s, 0}}},
				{at: 0, edit: two(3), layers: []wantLayer{{false, 0, 10 * s, 10 * s}, {true, 7, 3 * s, 0}}},
				{at: 0, edit: two(6), allowed: true, layers: []wantLayer{{true, 2, 10 * s, 0}, {true, 6, 4 * s, 0}}},
			},
		},
	}
}

func testStoresRescaleEditedLimits(t *testing.T, kinds []Kind) {
	for _, kind := range kinds {
		t.Run(kind.Name, func(t *testing.T) {
			for _, tc := range rescaleCases() {
				t.Run(tc.Name, func(t *testing.T) {
					clock := NewClock()
					store := kind.New(t, clock)
					runSteps(t, store, clock, "subject:"+tc.Name, tc.limits, tc.steps)
				})
			}
		})
	}
}
