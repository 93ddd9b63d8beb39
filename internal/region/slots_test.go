package region_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/region"
)

// TestConcurrencyHoldsToTheRegionsShare: with regions, a plan with a
// concurrency tier is decided (it answered 503 before the region store
// passed slots through), each region holding its share of the cap.
func TestConcurrencyHoldsToTheRegionsShare(t *testing.T) {
	for _, mode := range []region.Mode{region.Shared, region.Share, region.Sync} {
		t.Run(string(mode), func(t *testing.T) {
			cfg := region.Config{Region: "eu", Regions: []region.Weight{{Name: "eu", Weight: 1}, {Name: "us", Weight: 1}}, Mode: mode}
			want := 2 // half of 4
			var peers []region.PeerStore
			switch mode {
			case region.Shared:
				cfg, want = region.Config{Mode: region.Shared}, 4
			case region.Sync:
				peers = []region.PeerStore{{Name: "us", Ping: func(context.Context) error { return nil }, Charger: noCharge{}}}
			}
			s, err := region.New(memstore.New(memstore.Options{}), cfg, peers, nil)
			if err != nil {
				t.Fatal(err)
			}
			e := enforce.NewEngine(s, enforce.EngineOptions{})
			caller := enforce.Caller{Subject: "dev:1", Limits: []enforce.Limit{
				{Name: "inflight", Algorithm: enforce.Concurrency, Limit: 4},
				{Name: "rate", Algorithm: enforce.FixedWindow, Limit: 100, Window: time.Minute},
			}}
			got := 0
			for range 6 {
				o, err := e.Decide(context.Background(), enforce.Ask{Caller: caller, Route: "GET /x"})
				if err != nil {
					t.Fatalf("Decide: %v", err)
				}
				if o.Allowed {
					got++
				}
			}
			if got != want {
				t.Fatalf("%s: %d held of a cap of 4, want %d", mode, got, want)
			}
		})
	}
}

// noCharge is a peer that takes every publication (this test publishes no
// rate consumption it checks).
type noCharge struct{}

func (noCharge) Charge(context.Context, enforce.Request) error { return nil }
