package plans_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/plans"
)

// TestPrecisionRoundTrip: a tier's precision is stored, read back and
// handed to the engine; a tier that names none is exact, and reaches the
// engine as the zero precision it always had.
func TestPrecisionRoundTrip(t *testing.T) {
	s, _ := newService(t)
	ctx := context.Background()
	tier := func(name, algorithm, precision string) plans.LimitInput {
		return plans.LimitInput{Name: name, Algorithm: algorithm, Limit: 2000, WindowSeconds: 60, Precision: precision}
	}
	p := mustCreate(t, s, plans.PlanInput{Slug: "lease", Name: "Lease", Limits: []plans.LimitInput{
		tier("unsaid", "fixed_window", ""),
		tier("exact", "sliding_window_log", "exact"),
		tier("leased", "token_bucket", "leased"),
		tier("local", "sliding_window_counter", "local"),
	}})
	got, err := s.Get(ctx, p.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		stored, engine enforce.Precision
	}{{"exact", ""}, {"exact", ""}, {"leased", "leased"}, {"local", "local"}}
	for i, w := range want {
		l := got.Limits[i]
		if l.Precision != w.stored || l.Input().Precision != string(w.stored) || l.Enforce("lease").Precision != w.engine ||
			got.EnforceLimits()[i].Precision != w.engine {
			t.Errorf("%s: stored %q, input %q, engine %q; want %q, %q", l.Name, l.Precision, l.Input().Precision,
				l.Enforce("lease").Precision, w.stored, w.engine)
		}
	}

	t.Run("UpdateLimitChangesPrecision", func(t *testing.T) {
		in := got.Limits[0].Input()
		in.Precision = "leased"
		p2, err := s.UpdateLimit(ctx, actor, p.ID, got.Version, got.Limits[0].ID, in)
		if err != nil {
			t.Fatal(err)
		}
		if l := p2.Limits[0]; l.Precision != enforce.PrecisionLeased {
			t.Errorf("after UpdateLimit: precision %q, want leased", l.Precision)
		}
		// Update (the whole plan, as the admin API's PUT and plan files
		// write it) goes through ReplaceLimits.
		whole := p2.Input()
		whole.Limits[3].Precision = ""
		p3, err := s.Update(ctx, actor, p.ID, p2.Version, whole)
		if err != nil {
			t.Fatal(err)
		}
		if l := p3.Limits[3]; l.Precision != enforce.PrecisionExact {
			t.Errorf("after Update with no precision: %q, want exact", l.Precision)
		}
		if l := p3.Limits[0]; l.Precision != enforce.PrecisionLeased {
			t.Errorf("Update lost a leased tier's precision: %q", l.Precision)
		}
	})

	t.Run("KeyOverrideCarriesPrecision", func(t *testing.T) {
		limits, err := s.KeyLimits(ctx, "lease", []plans.LimitInput{tier("unsaid", "fixed_window", "local")})
		if err != nil {
			t.Fatal(err)
		}
		if limits[0].Name != "lease-unsaid" || limits[0].Precision != enforce.PrecisionLocal {
			t.Errorf("override: %+v, want lease-unsaid local", limits[0])
		}
	})
}

// TestPrecisionRefused: the rules of enforce.ValidatePrecision are field
// errors on precision, through a whole plan and a single tier alike, and
// nothing is written.
func TestPrecisionRefused(t *testing.T) {
	s, _ := newService(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		in   plans.LimitInput
		rule string
	}{
		{"ErrUnknown", plans.LimitInput{Name: "t", Algorithm: "fixed_window", Limit: 10, WindowSeconds: 60, Precision: "roughly"}, "must be exact, leased or local"},
		{"ErrLeasedConcurrency", plans.LimitInput{Name: "t", Algorithm: "concurrency", Limit: 10, Precision: "leased"}, "a concurrency limit is always exact"},
		{"ErrLocalConcurrency", plans.LimitInput{Name: "t", Algorithm: "concurrency", Limit: 10, Precision: "local"}, "a concurrency limit is always exact"},
		{"ErrLeasedQueue", plans.LimitInput{Name: "t", Algorithm: "leaky_bucket", Mode: "queue", Limit: 10, WindowSeconds: 60, Burst: 5, Precision: "leased"}, "a leaky bucket that queues is always exact"},
		{"ErrLocalQuota", plans.LimitInput{Name: "t", Algorithm: "quota", Period: "month", Limit: 1000, Precision: "local"}, "a quota is always exact"},
		{"ErrLeasedQuota", plans.LimitInput{Name: "t", Algorithm: "quota", Period: "month", Limit: 1000, Precision: "leased"}, "a quota is always exact"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Create(ctx, actor, plans.PlanInput{Slug: "bad", Name: "Bad", Limits: []plans.LimitInput{tc.in}})
			var ve *plans.ValidationError
			if !errors.As(err, &ve) || !ve.Has("limits[0].precision") || !strings.Contains(ve.Fields[0].Message, tc.rule) {
				t.Fatalf("Create = %v, want limits[0].precision: %s", err, tc.rule)
			}
			if strings.Contains(ve.Fields[0].Message, "invalid rate-limit request") {
				t.Errorf("the message carries the engine's prefix: %q", ve.Fields[0].Message)
			}
			if _, err := s.GetBySlug(ctx, "bad"); !errors.Is(err, plans.ErrNotFound) {
				t.Errorf("a refused plan was stored: %v", err)
			}
		})
	}
	p := mustCreate(t, s, plans.PlanInput{Slug: "ok", Name: "OK"})
	for _, tc := range []struct {
		name string
		in   plans.LimitInput
	}{
		{"LeasedFixedWindow", plans.LimitInput{Name: "q", Algorithm: "fixed_window", Limit: 1000, WindowSeconds: 60, Precision: "leased"}},
		{"LeasedRejectingLeakyBucket", plans.LimitInput{Name: "lb", Algorithm: "leaky_bucket", Limit: 10, WindowSeconds: 60, Burst: 5, Precision: "leased"}},
		{"LocalTokenBucket", plans.LimitInput{Name: "tb", Algorithm: "token_bucket", Limit: 10, WindowSeconds: 60, Precision: "local"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cur, err := s.Get(ctx, p.ID)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.AddLimit(ctx, actor, p.ID, cur.Version, tc.in); err != nil {
				t.Errorf("AddLimit = %v, want it accepted", err)
			}
		})
	}
	t.Run("ErrSingleTier", func(t *testing.T) {
		cur, err := s.Get(ctx, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.AddLimit(ctx, actor, p.ID, cur.Version, plans.LimitInput{Name: "c", Algorithm: "concurrency", Limit: 3, Precision: "leased"})
		var ve *plans.ValidationError
		if !errors.As(err, &ve) || !ve.Has("precision") {
			t.Fatalf("AddLimit = %v, want a field error on precision", err)
		}
	})
}
