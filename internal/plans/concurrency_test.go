package plans_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/plans"
)

// TestConcurrencyTiers: a concurrency tier needs no window, is stored
// through migration 000013's constraint and reaches the engine as a
// Concurrency limit; queue mode is allowed (a wait for a free slot).
func TestConcurrencyTiers(t *testing.T) {
	s, _ := newService(t)
	ctx := context.Background()
	p := mustCreate(t, s, validPlan())
	inFlight := plans.LimitInput{Name: "in-flight", Algorithm: "concurrency", Limit: 4, Mode: "queue"}
	p2, err := s.AddLimit(ctx, actor, p.ID, p.Version, inFlight)
	if err != nil {
		t.Fatalf("AddLimit(concurrency): %v", err)
	}
	got := p2.Limits[len(p2.Limits)-1]
	if got.Algorithm != enforce.Concurrency || got.Limit != 4 || got.Mode != enforce.ModeQueue {
		t.Fatalf("stored concurrency tier = %+v", got)
	}
	if l := got.Enforce(p.Slug); l.Algorithm != enforce.Concurrency || l.Limit != 4 || l.Name != p.Slug+"-in-flight" {
		t.Errorf("engine limit = %+v, want a concurrency limit of 4", l)
	}

	cases := []struct {
		name  string
		in    plans.LimitInput
		field string
	}{
		{"CostAboveOne", plans.LimitInput{Name: "c", Algorithm: "concurrency", Limit: 5, Cost: 2}, "cost"},
		{"WithBurst", plans.LimitInput{Name: "c", Algorithm: "concurrency", Limit: 5, Burst: 2}, "burst"},
		{"WithPeriod", plans.LimitInput{Name: "c", Algorithm: "concurrency", Limit: 5, Period: "day"}, "period"},
		{"NoLimit", plans.LimitInput{Name: "c", Algorithm: "concurrency"}, "limit"},
		{"QueueOnAFixedWindow", plans.LimitInput{Name: "c", Algorithm: "fixed_window", Limit: 5, WindowSeconds: 60, Mode: "queue"}, "mode"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			errs := plans.ValidateLimit("", tc.in, nil)
			if len(errs) != 1 || errs[0].Field != tc.field {
				t.Errorf("ValidateLimit = %+v, want one error on %s", errs, tc.field)
			}
			var ve *plans.ValidationError
			if _, err := s.AddLimit(ctx, actor, p.ID, p2.Version, tc.in); !errors.As(err, &ve) {
				t.Errorf("AddLimit = %v, want a validation error", err)
			}
		})
	}
}
