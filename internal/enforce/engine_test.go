package enforce_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/enforce/storetest"
)

// failingStore fails every decision as an unreachable backend does.
type failingStore struct{}

func (failingStore) Allow(context.Context, enforce.Request) (enforce.Decision, error) {
	return enforce.Decision{}, fmt.Errorf("dial: %w", enforce.ErrStoreUnavailable)
}

func (failingStore) Peek(context.Context, enforce.Request) (enforce.Decision, error) {
	return enforce.Decision{}, fmt.Errorf("dial: %w", enforce.ErrStoreUnavailable)
}

func engineCaller() enforce.Caller {
	return enforce.Caller{Subject: "dev:1", Key: "key:1", Plan: "pro", Limits: []enforce.Limit{
		{Name: "global", Algorithm: enforce.FixedWindow, Limit: 10, Window: time.Minute},
		{Name: "search", Algorithm: enforce.FixedWindow, Limit: 3, Window: time.Minute, Route: "GET /search"},
	}}
}

func TestEngineDecideCountsAdmissionsExactly(t *testing.T) {
	clock := storetest.NewClock()
	e := enforce.NewEngine(memstore.New(memstore.Options{Now: clock.Now}), enforce.EngineOptions{})
	ctx := context.Background()
	admitted := 0
	for range 5 {
		out, err := e.Decide(ctx, enforce.Ask{Caller: engineCaller(), Route: "GET /search"})
		if err != nil {
			t.Fatal(err)
		}
		if out.Allowed {
			admitted++
		}
		if len(out.Layers) != 2 || out.Degraded != enforce.NotDegraded {
			t.Fatalf("outcome %+v: want two layers, not degraded", out)
		}
	}
	if admitted != 3 {
		t.Fatalf("admitted %d of 5 on a tier of 3", admitted)
	}
	out, err := e.Decide(ctx, enforce.Ask{Caller: engineCaller(), Route: "GET /search"})
	if err != nil {
		t.Fatal(err)
	}
	fired, ok := out.Fired()
	if out.Allowed || !ok || fired.Limit.Name != "search" || fired.RetryAfter <= 0 {
		t.Fatalf("6th ask: allowed %v, fired %+v (%v); want rejected by search with a retry-after", out.Allowed, fired, ok)
	}
	// Another route sees only the plan-wide limit, which holds the 3.
	out, err = e.Decide(ctx, enforce.Ask{Caller: engineCaller(), Route: "GET /items"})
	if err != nil || !out.Allowed || len(out.Layers) != 1 || out.Layers[0].Remaining != 6 {
		t.Fatalf("other route: %+v, %v; want admitted by global alone with 6 remaining", out, err)
	}
}

func TestEngineDecideMultipliesHitsAndPeeksForFree(t *testing.T) {
	clock := storetest.NewClock()
	e := enforce.NewEngine(memstore.New(memstore.Options{Now: clock.Now}), enforce.EngineOptions{})
	ctx := context.Background()
	out, err := e.Decide(ctx, enforce.Ask{Caller: engineCaller(), Route: "GET /items", Hits: 4})
	if err != nil || !out.Allowed || out.Layers[0].Remaining != 6 {
		t.Fatalf("4 hits: %+v, %v; want 6 remaining", out, err)
	}
	for range 3 {
		out, err = e.Decide(ctx, enforce.Ask{Caller: engineCaller(), Route: "GET /items", Peek: true})
		if err != nil || out.Layers[0].Remaining != 6 {
			t.Fatalf("peek: %+v, %v; want 6 remaining, nothing consumed", out, err)
		}
	}
	out, err = e.Decide(ctx, enforce.Ask{Caller: engineCaller(), Route: "GET /items", Hits: 7})
	if err != nil || out.Allowed || out.Layers[0].Remaining != 6 {
		t.Fatalf("7 hits over 6 remaining: %+v, %v; want rejected, nothing consumed", out, err)
	}
}

func TestEngineDecideAppliesTheFailureMode(t *testing.T) {
	ctx := context.Background()
	t.Run("Open", func(t *testing.T) {
		e := enforce.NewEngine(failingStore{}, enforce.EngineOptions{FailureMode: enforce.FailOpen})
		out, err := e.Decide(ctx, enforce.Ask{Caller: engineCaller()})
		if err != nil || !out.Allowed || out.Degraded != enforce.DegradedStoreUnavailable || len(out.Layers) != 0 {
			t.Fatalf("%+v, %v; want admitted without layers, store-unavailable", out, err)
		}
	})
	t.Run("Closed", func(t *testing.T) {
		e := enforce.NewEngine(failingStore{}, enforce.EngineOptions{FailureMode: enforce.FailClosed})
		if _, err := e.Decide(ctx, enforce.Ask{Caller: engineCaller()}); !errors.Is(err, enforce.ErrStoreUnavailable) {
			t.Fatalf("err %v, want ErrStoreUnavailable", err)
		}
	})
	t.Run("NoLimits", func(t *testing.T) {
		e := enforce.NewEngine(failingStore{}, enforce.EngineOptions{})
		out, err := e.Decide(ctx, enforce.Ask{Caller: enforce.Caller{Subject: "ip:1"}})
		if err != nil || !out.Allowed || out.Layers != nil {
			t.Fatalf("%+v, %v; want admitted, no store call", out, err)
		}
	})
}

func TestEngineDecideHoldsConcurrencySlots(t *testing.T) {
	clock := storetest.NewClock()
	e := enforce.NewEngine(memstore.New(memstore.Options{Now: clock.Now}), enforce.EngineOptions{})
	ctx := context.Background()
	caller := enforce.Caller{Subject: "dev:2", Limits: []enforce.Limit{
		{Name: "inflight", Algorithm: enforce.Concurrency, Limit: 2},
		{Name: "rate", Algorithm: enforce.FixedWindow, Limit: 100, Window: time.Minute},
	}}
	var held []*enforce.Lease
	admitted := 0
	for range 4 {
		out, err := e.Decide(ctx, enforce.Ask{Caller: caller})
		if err != nil {
			t.Fatal(err)
		}
		if out.Allowed {
			admitted++
			held = append(held, out.Lease)
		} else if out.Lease != nil {
			t.Fatal("a rejected ask holds a lease")
		}
	}
	if admitted != 2 {
		t.Fatalf("admitted %d with 2 slots", admitted)
	}
	out, _ := e.Decide(ctx, enforce.Ask{Caller: caller, Peek: true})
	if out.Layers[1].Remaining != 98 {
		t.Fatalf("rate remaining %d, want 98: refused slots consume no rate", out.Layers[1].Remaining)
	}
	for _, l := range held {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := e.Decide(ctx, enforce.Ask{Caller: caller}); err != nil || !out.Allowed {
		t.Fatalf("after release: %+v, %v", out, err)
	}
}

// TestPeekAllRoutesShowsEveryTier: a peek for a caller's whole picture
// (AllRoutes) evaluates every limit whatever its route; without it, an
// ask with no route sees the plan-wide limits only.
func TestPeekAllRoutesShowsEveryTier(t *testing.T) {
	e := enforce.NewEngine(memstore.New(memstore.Options{}), enforce.EngineOptions{})
	caller := enforce.Caller{Subject: "dev:5", Limits: []enforce.Limit{
		{Name: "plan", Algorithm: enforce.FixedWindow, Limit: 10, Window: time.Minute},
		{Name: "search", Route: "GET /search", Algorithm: enforce.FixedWindow, Limit: 3, Window: time.Minute},
	}}
	ctx := context.Background()
	o, err := e.Decide(ctx, enforce.Ask{Caller: caller, Peek: true, AllRoutes: true})
	if err != nil || len(o.Layers) != 2 {
		t.Fatalf("AllRoutes peek: %d layers, %v; want both tiers", len(o.Layers), err)
	}
	o, err = e.Decide(ctx, enforce.Ask{Caller: caller, Peek: true})
	if err != nil || len(o.Layers) != 1 || o.Layers[0].Limit.Name != "plan" {
		t.Fatalf("peek without a route: %+v, %v; want the plan-wide limit only", o.Layers, err)
	}
	// AllRoutes never consumes: it only applies to a peek.
	o, _ = e.Decide(ctx, enforce.Ask{Caller: caller, AllRoutes: true})
	if len(o.Layers) != 1 {
		t.Fatalf("AllRoutes without Peek decided %d layers, want the plan-wide one", len(o.Layers))
	}
}
