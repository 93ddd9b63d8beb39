package plans_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/plans"
)

// TestCountPer: a tier says whose state it counts; the usual rule (per key
// on a route, per developer plan-wide) holds when it says nothing, and the
// engine's PerKey follows what was stored.
func TestCountPer(t *testing.T) {
	s, _ := newService(t)
	ctx := context.Background()
	tier := func(name, route, countPer string) plans.LimitInput {
		return plans.LimitInput{Name: name, Route: route, Algorithm: "fixed_window", Limit: 10, WindowSeconds: 60, CountPer: countPer}
	}
	p := mustCreate(t, s, plans.PlanInput{Slug: "team", Name: "Team", Limits: []plans.LimitInput{
		tier("route-default", "GET /api/search", ""),
		tier("route-developer", "GET /api/items/{id}", "developer"),
		tier("wide-default", "", ""),
		tier("wide-key", "", "key"),
	}})
	want := []struct {
		countPer string
		perKey   bool
	}{{"key", true}, {"developer", false}, {"developer", false}, {"key", true}}
	got, err := s.Get(ctx, p.ID)
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range want {
		l := got.Limits[i]
		if l.CountPer != w.countPer || l.Enforce("team").PerKey != w.perKey || l.Input().CountPer != w.countPer {
			t.Errorf("%s: count_per %q, PerKey %v, input %q; want %q, %v", l.Name, l.CountPer, l.Enforce("team").PerKey,
				l.Input().CountPer, w.countPer, w.perKey)
		}
	}

	t.Run("UpdateLimitChangesCountPer", func(t *testing.T) {
		in := got.Limits[0].Input()
		in.CountPer = "developer"
		p2, err := s.UpdateLimit(ctx, actor, p.ID, got.Version, got.Limits[0].ID, in)
		if err != nil {
			t.Fatal(err)
		}
		if l := p2.Limits[0]; l.CountPer != "developer" || l.Enforce("team").PerKey {
			t.Errorf("after update: %+v, PerKey %v", l, l.Enforce("team").PerKey)
		}
	})
	t.Run("ErrUnknownCountPer", func(t *testing.T) {
		_, err := s.Create(ctx, actor, plans.PlanInput{Slug: "bad", Name: "Bad", Limits: []plans.LimitInput{tier("x", "", "team")}})
		var ve *plans.ValidationError
		if !errors.As(err, &ve) || !ve.Has("limits[0].count_per") {
			t.Fatalf("Create = %v, want a field error on limits[0].count_per", err)
		}
	})
}

// TestDegradeNeedsReducedAnswer: a degrade tier on a route that has no
// reduced answer would serve the full answer marked degraded; it is refused
// with the mode field named, through a whole plan and a single tier alike.
func TestDegradeNeedsReducedAnswer(t *testing.T) {
	s, _ := newService(t)
	s = s.WithReducedAnswers([]string{"GET /api/search"})
	ctx := context.Background()
	degrade := func(route string) plans.LimitInput {
		return plans.LimitInput{Name: "t", Route: route, Algorithm: "fixed_window", Mode: "degrade", Limit: 10, WindowSeconds: 60}
	}
	for _, tc := range []struct {
		name, route string
		ok          bool
	}{
		{"SearchHasOne", "GET /api/search", true},
		{"ErrItemsHasNone", "GET /api/items/{id}", false},
		{"ErrReportsHasNone", "POST /api/reports", false},
		{"ErrPlanWideCoversItems", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			slug := strings.ToLower(tc.name)
			_, err := s.Create(ctx, actor, plans.PlanInput{Slug: slug, Name: tc.name, Limits: []plans.LimitInput{degrade(tc.route)}})
			var ve *plans.ValidationError
			switch {
			case tc.ok && err != nil:
				t.Fatalf("Create = %v, want success", err)
			case !tc.ok && (!errors.As(err, &ve) || !ve.Has("limits[0].mode") || !strings.Contains(ve.Error(), "reduced answer")):
				t.Fatalf("Create = %v, want a field error on limits[0].mode about the reduced answer", err)
			}
			if tc.ok {
				return
			}
			p := mustCreate(t, s, plans.PlanInput{Slug: slug, Name: tc.name})
			_, err = s.AddLimit(ctx, actor, p.ID, p.Version, degrade(tc.route))
			if !errors.As(err, &ve) || !ve.Has("mode") {
				t.Fatalf("AddLimit = %v, want a field error on mode", err)
			}
		})
	}
}
