package failover_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/failover"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/enforce/storetest"
)

// newOutage returns a failover store over a primary that refuses every
// call, with its breaker open, deciding on a local memory store as one of
// four instances. clock is the local store's; the breaker's stands still,
// so it stays open (no probe sends a call to the primary).
func newOutage(t *testing.T) (store *failover.Store, clock *storetest.Clock) {
	t.Helper()
	clock = storetest.NewClockAt(time.Unix(1_800_000_000, 0))
	store = failover.New(&scriptedStore{err: refused}, failover.Options{
		Local:     memstore.New(memstore.Options{Now: clock.Now}),
		Instances: 4,
		Now:       storetest.NewClockAt(time.Unix(1_800_000_000, 0)).Now,
	})
	opener := enforce.Request{Subject: "key:opener", Limits: []enforce.Limit{{Name: "l", Algorithm: enforce.FixedWindow, Limit: 1e9, Window: time.Hour}}}
	for i := 0; store.BreakerState() != "open"; i++ {
		if i > failover.DefaultBreakerMinRequests {
			t.Fatalf("breaker still %s after %d refused calls", store.BreakerState(), i)
		}
		if _, err := store.Allow(context.Background(), opener); err != nil {
			t.Fatal(err)
		}
	}
	return store, clock
}

// TestTheLocalStoreSeesDividedLimitsOnEveryPath: while the breaker is
// open, a charge and a refund reach the local store with the limits its
// decisions are made with (each divided by the instance count), so they
// act on the same state those decisions do.
func TestTheLocalStoreSeesDividedLimitsOnEveryPath(t *testing.T) {
	ctx := context.Background()
	t.Run("ChargeCostsWhatADecisionDoes", func(t *testing.T) {
		// 8 a minute is 2 a minute on each of four instances: a unit is
		// repaid in 30 s, not 7.5 s, so 20 s after two units were spent,
		// one is still owed whether they were spent by a decision or by
		// a charge.
		store, clock := newOutage(t)
		bucket := []enforce.Limit{{Name: "b", Algorithm: enforce.TokenBucket, Limit: 8, Window: time.Minute, Burst: 8, Cost: 2}}
		decided := enforce.Request{Subject: "key:decided", Limits: bucket}
		charged := enforce.Request{Subject: "key:charged", Limits: bucket}
		d, err := store.Allow(ctx, decided)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed || !d.Local {
			t.Fatalf("decision allowed=%t local=%t, want a local admission", d.Allowed, d.Local)
		}
		if err := store.Charge(ctx, charged); err != nil {
			t.Fatal(err)
		}
		clock.Advance(20 * time.Second)
		bucket[0].Cost = 1
		want, err := store.Peek(ctx, decided)
		if err != nil {
			t.Fatal(err)
		}
		got, err := store.Peek(ctx, charged)
		if err != nil {
			t.Fatal(err)
		}
		// 40 s of debt against a tolerance of 60 s: a unit more (30 s) is
		// 10 s too many.
		if w := want.Layers[0]; w.Allowed || w.Remaining != 0 || w.ResetAfter != 40*time.Second || w.RetryAfter != 10*time.Second {
			t.Fatalf("after a decision: allowed %t, remaining %d, reset %s, retry %s; want false, 0, 40s, 10s", w.Allowed, w.Remaining, w.ResetAfter, w.RetryAfter)
		}
		if g, w := got.Layers[0], want.Layers[0]; g.Allowed != w.Allowed || g.Remaining != w.Remaining || g.ResetAfter != w.ResetAfter || g.RetryAfter != w.RetryAfter {
			t.Errorf("after a charge: allowed %t, remaining %d, reset %s, retry %s; want %t, %d, %s, %s as after a decision",
				g.Allowed, g.Remaining, g.ResetAfter, g.RetryAfter, w.Allowed, w.Remaining, w.ResetAfter, w.RetryAfter)
		}
	})
	t.Run("RefundGivesBackALocalDecision", func(t *testing.T) {
		// 100 an hour is 25 on each of four instances.
		store, clock := newOutage(t)
		req := enforce.Request{Subject: "key:refunded", Limits: []enforce.Limit{{Name: "w", Algorithm: enforce.FixedWindow, Limit: 100, Window: time.Hour, Cost: 3}}}
		at := clock.Now()
		d, err := store.Allow(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed || !d.Local || d.Layers[0].Remaining != 22 {
			t.Fatalf("decision allowed=%t local=%t remaining=%d, want a local admission leaving 22 of 25", d.Allowed, d.Local, d.Layers[0].Remaining)
		}
		if err := store.Refund(ctx, req, at); err != nil {
			t.Fatal(err)
		}
		req.Limits[0].Cost = 1
		p, err := store.Peek(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Layers[0].Remaining; got != 25 {
			t.Errorf("remaining %d after the refund, want all 25", got)
		}
	})
}
