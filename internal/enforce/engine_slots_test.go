package enforce_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
)

// countingSlots is a memory store that counts its slot acquisitions and
// says when one is refused, so a test knows an ask is waiting without
// sleeping.
type countingSlots struct {
	*memstore.Store
	acquired atomic.Int64
	refused  chan struct{} // a send (dropped when full) per refusal
}

func newCountingSlots() *countingSlots {
	return &countingSlots{Store: memstore.New(memstore.Options{}), refused: make(chan struct{}, 1)}
}

func (s *countingSlots) AcquireSlots(ctx context.Context, req enforce.Request, lease time.Duration) (*enforce.Lease, enforce.Decision, error) {
	s.acquired.Add(1)
	l, d, err := s.Store.AcquireSlots(ctx, req, lease)
	if err == nil && !d.Allowed {
		select {
		case s.refused <- struct{}{}:
		default:
		}
	}
	return l, d, err
}

// usage sums subject's admitted and rejected requests in the usage series.
func usage(t *testing.T, s *memstore.Store, subject string) (admitted, rejected int64) {
	t.Helper()
	pts, err := s.Usage(context.Background(), []string{subject}, time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pts {
		admitted += p.Admitted
		rejected += p.Rejected
	}
	return admitted, rejected
}

func queueCaller(subject string, mode enforce.Mode) enforce.Caller {
	return enforce.Caller{Subject: subject, Limits: []enforce.Limit{
		{Name: "inflight", Algorithm: enforce.Concurrency, Limit: 1, Mode: mode},
		{Name: "rate", Algorithm: enforce.FixedWindow, Limit: 100, Window: time.Hour},
	}}
}

// TestEngineQueuesForASlot: an ask refused by queue-mode concurrency
// limits waits up to its QueueFor for a slot, and is counted once in the
// usage series and charged once on its rate layers however often it
// asked.
func TestEngineQueuesForASlot(t *testing.T) {
	ctx := context.Background()

	t.Run("SlotFreedWhileWaitingIsTaken", func(t *testing.T) {
		store := newCountingSlots()
		e := enforce.NewEngine(store, enforce.EngineOptions{})
		caller := queueCaller("dev:q1", enforce.ModeQueue)
		first, err := e.Decide(ctx, enforce.Ask{Caller: caller})
		if err != nil || !first.Allowed || first.Lease == nil {
			t.Fatalf("first: %+v, %v", first, err)
		}
		type result struct {
			out enforce.Outcome
			err error
		}
		done := make(chan result, 1)
		go func() {
			out, err := e.Decide(ctx, enforce.Ask{Caller: caller, QueueFor: time.Minute})
			done <- result{out, err}
		}()
		select {
		case <-store.refused:
		case <-time.After(30 * time.Second):
			t.Fatal("the second ask was never refused a slot")
		}
		if err := first.Lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
		var got result
		select {
		case got = <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("the waiting ask did not take the freed slot")
		}
		if got.err != nil || !got.out.Allowed || got.out.Lease == nil {
			t.Fatalf("waiting ask: %+v, %v; want admitted holding a lease", got.out, got.err)
		}
		if got.out.SlotWait <= 0 {
			t.Errorf("SlotWait %v after waiting, want > 0", got.out.SlotWait)
		}
		if first.SlotWait != 0 {
			t.Errorf("SlotWait %v of an ask that took its slot at once, want 0", first.SlotWait)
		}
		if n := store.acquired.Load(); n < 3 {
			t.Errorf("%d acquisitions, want at least 3 (first, refused, taken)", n)
		}
		if out, _ := e.Decide(ctx, enforce.Ask{Caller: caller}); out.Allowed || out.Lease != nil {
			t.Fatalf("a third ask beside the waiter's slot: %+v, want refused", out)
		}
		peek, err := e.Decide(ctx, enforce.Ask{Caller: caller, Peek: true})
		if err != nil {
			t.Fatal(err)
		}
		if r := peek.Layers[1].Remaining; r != 98 {
			t.Errorf("rate remaining %d, want 98: charged once per admitted ask", r)
		}
		if a, r := usage(t, store.Store, "dev:q1"); a != 2 || r != 1 {
			t.Errorf("usage series: %d admitted, %d rejected; want 2 and 1", a, r)
		}
		got.out.Lease.Release(ctx)
	})

	t.Run("PastItsWaitRefusedHoldingNothing", func(t *testing.T) {
		store := newCountingSlots()
		e := enforce.NewEngine(store, enforce.EngineOptions{})
		caller := queueCaller("dev:q2", enforce.ModeQueue)
		first, err := e.Decide(ctx, enforce.Ask{Caller: caller})
		if err != nil || !first.Allowed {
			t.Fatalf("first: %+v, %v", first, err)
		}
		out, err := e.Decide(ctx, enforce.Ask{Caller: caller, QueueFor: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if out.Allowed || out.Lease != nil || out.SlotWait != 0 {
			t.Fatalf("past its wait: %+v; want refused, no lease, no SlotWait", out)
		}
		if len(out.Layers) != 2 || out.Layers[0].Allowed || !out.Layers[1].Allowed {
			t.Errorf("layers %+v: want the refused slot beside the peeked rate layer", out.Layers)
		}
		if n := store.acquired.Load(); n < 3 {
			t.Errorf("%d acquisitions, want at least 3: the ask asked again while it waited", n)
		}
		if err := first.Lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
		next, err := e.Decide(ctx, enforce.Ask{Caller: caller})
		if err != nil || !next.Allowed {
			t.Fatalf("after the holder left: %+v, %v; the refused ask holds a slot", next, err)
		}
		next.Lease.Release(ctx)
		if a, r := usage(t, store.Store, "dev:q2"); a != 2 || r != 1 {
			t.Errorf("usage series: %d admitted, %d rejected; want 2 and 1: a waiting ask counts once", a, r)
		}
	})

	t.Run("RejectModeDoesNotWait", func(t *testing.T) {
		store := newCountingSlots()
		e := enforce.NewEngine(store, enforce.EngineOptions{})
		caller := queueCaller("dev:q3", enforce.ModeReject)
		first, _ := e.Decide(ctx, enforce.Ask{Caller: caller})
		defer first.Lease.Release(ctx)
		before := store.acquired.Load()
		out, err := e.Decide(ctx, enforce.Ask{Caller: caller, QueueFor: time.Minute})
		if err != nil || out.Allowed {
			t.Fatalf("%+v, %v; want refused", out, err)
		}
		if n := store.acquired.Load() - before; n != 1 {
			t.Fatalf("%d acquisitions for a reject-mode slot, want 1", n)
		}
	})

	t.Run("CancelledWhileWaiting", func(t *testing.T) {
		store := newCountingSlots()
		e := enforce.NewEngine(store, enforce.EngineOptions{FailureMode: enforce.FailOpen})
		caller := queueCaller("dev:q4", enforce.ModeQueue)
		first, _ := e.Decide(ctx, enforce.Ask{Caller: caller})
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			out, err := e.Decide(cctx, enforce.Ask{Caller: caller, QueueFor: time.Minute})
			if err == nil {
				err = errors.New("no error")
				if out.Lease != nil {
					out.Lease.Release(ctx)
				}
			}
			done <- err
		}()
		select {
		case <-store.refused:
		case <-time.After(30 * time.Second):
			t.Fatal("the second ask was never refused a slot")
		}
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("err %v, want context.Canceled (not failed open)", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the cancelled ask kept waiting")
		}
		first.Lease.Release(ctx)
		if out, err := e.Decide(ctx, enforce.Ask{Caller: caller}); err != nil || !out.Allowed {
			t.Fatalf("after both left: %+v, %v", out, err)
		}
	})
}

// TestEngineDegradeKeepsTheLease: an ask rejected by degrade-mode layers
// only is served reduced, so it keeps its slots; one any other layer
// rejects gives them back.
func TestEngineDegradeKeepsTheLease(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		mode     enforce.Mode
		holds    bool
		degraded string
	}{
		{"DegradeHolds", enforce.ModeDegrade, true, "rate"},
		{"RejectReleases", enforce.ModeReject, false, ""},
		{"QueueReleases", enforce.ModeQueue, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := enforce.NewEngine(memstore.New(memstore.Options{}), enforce.EngineOptions{})
			caller := enforce.Caller{Subject: "dev:d", Limits: []enforce.Limit{
				{Name: "inflight", Algorithm: enforce.Concurrency, Limit: 5},
				{Name: "rate", Algorithm: enforce.FixedWindow, Limit: 1, Window: time.Hour, Mode: tc.mode},
			}}
			first, err := e.Decide(ctx, enforce.Ask{Caller: caller})
			if err != nil || !first.Allowed || first.Lease == nil {
				t.Fatalf("first: %+v, %v", first, err)
			}
			over, err := e.Decide(ctx, enforce.Ask{Caller: caller})
			if err != nil || over.Allowed {
				t.Fatalf("over the rate: %+v, %v; want rejected", over, err)
			}
			tier, ok := over.Degradable()
			if ok != tc.holds || tier != tc.degraded {
				t.Errorf("Degradable() = %q, %v; want %q, %v", tier, ok, tc.degraded, tc.holds)
			}
			if (over.Lease != nil) != tc.holds {
				t.Fatalf("lease %v; want held: %v", over.Lease, tc.holds)
			}
			peek, err := e.Decide(ctx, enforce.Ask{Caller: caller, Peek: true})
			if err != nil {
				t.Fatal(err)
			}
			want := int64(4) // the first ask's slot
			if tc.holds {
				want = 3
			}
			if r := peek.Layers[0].Remaining; r != want {
				t.Errorf("slots remaining %d, want %d", r, want)
			}
			over.Lease.Release(ctx)
			first.Lease.Release(ctx)
		})
	}
}
