package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
)

// testStoresAgreeOnRefunds: units given back for a decision are available
// again while its window, period or bucket level lasts, and a refund that
// comes after the window moved on gives nothing; a sliding log refuses.
func testStoresAgreeOnRefunds(t *testing.T, kinds []Kind) {
	type step struct {
		at        time.Duration // from Epoch
		refund    int64         // units given back for the decision at `of`, instead of a decision
		of        time.Duration
		allowed   bool
		remaining int64
	}
	cases := []struct {
		name  string
		limit enforce.Limit
		steps []step
	}{
		{"FixedWindow", enforce.Limit{Name: "fw", Algorithm: enforce.FixedWindow, Limit: 10, Window: time.Second, Cost: 6}, []step{
			{at: 0, allowed: true, remaining: 4},
			{at: 100 * time.Millisecond, allowed: false, remaining: 4},
			{at: 200 * time.Millisecond, refund: 5, of: 0},
			{at: 300 * time.Millisecond, allowed: true, remaining: 3},
			// next window: a late refund of the last one gives nothing
			{at: 1100 * time.Millisecond, allowed: true, remaining: 4},
			{at: 1200 * time.Millisecond, refund: 6, of: 300 * time.Millisecond},
			{at: 1300 * time.Millisecond, allowed: false, remaining: 4},
			// more than was taken: never below zero
			{at: 1400 * time.Millisecond, refund: 100, of: 1100 * time.Millisecond},
			{at: 1500 * time.Millisecond, allowed: true, remaining: 4},
		}},
		{"SlidingCounter", enforce.Limit{Name: "swc", Algorithm: enforce.SlidingWindowCounter, Limit: 10, Window: time.Second, Cost: 6}, []step{
			{at: 0, allowed: true, remaining: 4},
			{at: 100 * time.Millisecond, refund: 6, of: 0},
			{at: 200 * time.Millisecond, allowed: true, remaining: 4},
			// a window on, the decision's units are the previous count
			{at: 1000 * time.Millisecond, refund: 6, of: 200 * time.Millisecond},
			{at: 1000 * time.Millisecond, allowed: true, remaining: 4},
		}},
		{"TokenBucket", enforce.Limit{Name: "tb", Algorithm: enforce.TokenBucket, Limit: 10, Window: time.Second, Cost: 6}, []step{
			{at: 0, allowed: true, remaining: 4},
			{at: 0, refund: 4, of: 0},
			{at: 0, allowed: true, remaining: 2},
			// a refund past full leaves the bucket full
			{at: 0, refund: 50, of: 0},
			{at: 0, allowed: true, remaining: 4},
		}},
		{"LeakyBucket", enforce.Limit{Name: "lb", Algorithm: enforce.LeakyBucket, Limit: 10, Window: time.Second, Burst: 9, Cost: 6}, []step{
			{at: 0, allowed: true, remaining: 4},
			{at: 0, refund: 6, of: 0},
			{at: 0, allowed: true, remaining: 4},
		}},
		{"Quota", enforce.Limit{Name: "q", Algorithm: enforce.Quota, Period: enforce.PeriodDay, Limit: 10, Cost: 6}, []step{
			{at: 0, allowed: true, remaining: 4},
			{at: time.Hour, refund: 6, of: 0},
			{at: 2 * time.Hour, allowed: true, remaining: 4},
			{at: 2 * time.Hour, allowed: false, remaining: 4},
		}},
	}
	for _, kind := range kinds {
		t.Run(kind.Name, func(t *testing.T) {
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					clock := NewClock()
					store, ok := kind.New(t, clock).(enforce.Refunder)
					if !ok {
						t.Skipf("%s gives nothing back", kind.Name)
					}
					ctx := context.Background()
					for i, s := range c.steps {
						clock.Set(Epoch.Add(s.at))
						if s.refund > 0 {
							l := c.limit
							l.Cost = s.refund
							if err := store.Refund(ctx, enforce.Request{Subject: "dev:9", Limits: []enforce.Limit{l}}, Epoch.Add(s.of)); err != nil {
								t.Fatalf("step %d: Refund: %v", i, err)
							}
							continue
						}
						d, err := store.(enforce.Store).Allow(ctx, enforce.Request{Subject: "dev:9", Limits: []enforce.Limit{c.limit}})
						if err != nil || d.Allowed != s.allowed || d.Layers[0].Remaining != s.remaining {
							t.Fatalf("step %d at %s: Allow = %v remaining %d (%v), want %v remaining %d", i, s.at, d.Allowed, d.Layers[0].Remaining, err, s.allowed, s.remaining)
						}
					}
				})
			}
			t.Run("SlidingLogRefuses", func(t *testing.T) {
				store, ok := kind.New(t, NewClock()).(enforce.Refunder)
				if !ok {
					t.Skipf("%s gives nothing back", kind.Name)
				}
				l := enforce.Limit{Name: "swl", Algorithm: enforce.SlidingWindowLog, Limit: 10, Window: time.Second}
				if err := store.Refund(context.Background(), enforce.Request{Subject: "dev:9", Limits: []enforce.Limit{l}}, Epoch); !errors.Is(err, enforce.ErrNotRefundable) {
					t.Fatalf("Refund(sliding log) = %v, want ErrNotRefundable", err)
				}
			})
		})
	}
}
