package plans_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/plans"
)

var testRoutes = []string{"GET /api/search", "GET /api/items/{id}", "POST /api/reports"}

func validTier() plans.LimitInput {
	return plans.LimitInput{Name: "search", Route: "GET /api/search", Algorithm: "fixed_window",
		Mode: "reject", Limit: 100, WindowSeconds: 60, Cost: 1}
}

func validPlan() plans.PlanInput {
	global := plans.LimitInput{Name: "global", Algorithm: "token_bucket", Limit: 1000, WindowSeconds: 3600, Burst: 50}
	return plans.PlanInput{Slug: "pro", Name: "Pro", Description: "For production use", IsPublic: true,
		Limits: []plans.LimitInput{global, validTier()}}
}

// withTier returns a valid plan whose second tier is changed by edit.
func withTier(edit func(*plans.LimitInput)) plans.PlanInput {
	p := validPlan()
	edit(&p.Limits[1])
	return p
}

func TestValidate(t *testing.T) {
	t.Run("AcceptsValidPlan", func(t *testing.T) {
		if err := plans.Validate(validPlan(), testRoutes); err != nil {
			t.Fatalf("Validate(valid) = %v, want nil", err)
		}
	})
	t.Run("AcceptsDefaults", func(t *testing.T) {
		p := withTier(func(l *plans.LimitInput) { l.Cost = 0; l.Mode = "" })
		if err := plans.Validate(p, testRoutes); err != nil {
			t.Fatalf("Validate(cost 0, mode \"\") = %v, want nil (defaults 1 and reject)", err)
		}
	})
	t.Run("AcceptsCostSettledAfterTheResponse", func(t *testing.T) {
		for _, when := range []string{"", "always", "success", "error"} {
			p := withTier(func(l *plans.LimitInput) { l.CountWhen = when; l.CostHeader = " x-tokens-used " })
			if err := plans.Validate(p, testRoutes); err != nil {
				t.Fatalf("Validate(count_when %q, cost_header) = %v, want nil", when, err)
			}
		}
	})
	t.Run("AcceptsQueueWithLeakyBucketAndBurst", func(t *testing.T) {
		p := withTier(func(l *plans.LimitInput) { l.Algorithm = "leaky_bucket"; l.Mode = "queue"; l.Burst = 5 })
		if err := plans.Validate(p, testRoutes); err != nil {
			t.Fatalf("Validate = %v, want nil", err)
		}
	})

	tests := []struct {
		name  string
		in    plans.PlanInput
		field string
	}{
		{"EmptySlug", func() plans.PlanInput { p := validPlan(); p.Slug = ""; return p }(), "slug"},
		{"UppercaseSlug", func() plans.PlanInput { p := validPlan(); p.Slug = "Pro"; return p }(), "slug"},
		{"SlugStartsWithDash", func() plans.PlanInput { p := validPlan(); p.Slug = "-pro"; return p }(), "slug"},
		{"SlugTooLong", func() plans.PlanInput { p := validPlan(); p.Slug = strings.Repeat("a", 64); return p }(), "slug"},
		{"BlankName", func() plans.PlanInput { p := validPlan(); p.Name = "  "; return p }(), "name"},
		{"NameTooLong", func() plans.PlanInput { p := validPlan(); p.Name = strings.Repeat("n", 101); return p }(), "name"},
		{"DescriptionTooLong", func() plans.PlanInput { p := validPlan(); p.Description = strings.Repeat("d", 2001); return p }(), "description"},
		{"TooManyLimits", func() plans.PlanInput {
			p := validPlan()
			p.Limits = nil
			for i := range 51 {
				l := validTier()
				l.Name = "t" + strings.Repeat("x", i%5) + string(rune('a'+i%26)) + string(rune('a'+i/26))
				l.WindowSeconds = int64(60 + i)
				p.Limits = append(p.Limits, l)
			}
			return p
		}(), "limits"},
		{"LimitNameEmpty", withTier(func(l *plans.LimitInput) { l.Name = "" }), "limits[1].name"},
		{"LimitNameWithSpace", withTier(func(l *plans.LimitInput) { l.Name = "my tier" }), "limits[1].name"},
		{"UnknownRoute", withTier(func(l *plans.LimitInput) { l.Route = "GET /api/nope" }), "limits[1].route"},
		{"RouteWithoutMethod", withTier(func(l *plans.LimitInput) { l.Route = "/api/search" }), "limits[1].route"},
		{"UnknownAlgorithm", withTier(func(l *plans.LimitInput) { l.Algorithm = "magic" }), "limits[1].algorithm"},
		{"EmptyAlgorithm", withTier(func(l *plans.LimitInput) { l.Algorithm = "" }), "limits[1].algorithm"},
		{"UnknownMode", withTier(func(l *plans.LimitInput) { l.Mode = "drop" }), "limits[1].mode"},
		{"QueueWithoutLeakyBucket", withTier(func(l *plans.LimitInput) { l.Mode = "queue" }), "limits[1].mode"},
		{"LimitZero", withTier(func(l *plans.LimitInput) { l.Limit = 0 }), "limits[1].limit"},
		{"LimitNegative", withTier(func(l *plans.LimitInput) { l.Limit = -5 }), "limits[1].limit"},
		{"WindowZero", withTier(func(l *plans.LimitInput) { l.WindowSeconds = 0 }), "limits[1].window_seconds"},
		{"WindowOver31Days", withTier(func(l *plans.LimitInput) { l.WindowSeconds = 31*24*3600 + 1 }), "limits[1].window_seconds"},
		{"BurstOnFixedWindow", withTier(func(l *plans.LimitInput) { l.Burst = 10 }), "limits[1].burst"},
		{"BurstOnSlidingLog", withTier(func(l *plans.LimitInput) { l.Algorithm = "sliding_window_log"; l.Burst = 1 }), "limits[1].burst"},
		{"TokenBucketBurstBelowCost", withTier(func(l *plans.LimitInput) { l.Algorithm = "token_bucket"; l.Cost = 5; l.Burst = 3 }), "limits[1].burst"},
		{"LeakyBucketNegativeBurst", withTier(func(l *plans.LimitInput) { l.Algorithm = "leaky_bucket"; l.Burst = -1 }), "limits[1].burst"},
		{"CostNegative", withTier(func(l *plans.LimitInput) { l.Cost = -1 }), "limits[1].cost"},
		{"CostAboveLimit", withTier(func(l *plans.LimitInput) { l.Limit = 10; l.Cost = 11 }), "limits[1].cost"},
		{"CostAboveMax", withTier(func(l *plans.LimitInput) { l.Limit = 5_000_000; l.Cost = 1_000_001 }), "limits[1].cost"},
		{"DuplicateName", withTier(func(l *plans.LimitInput) { l.Name = "global"; l.WindowSeconds = 30 }), "limits[1].name"},
		{"UnknownCountWhen", withTier(func(l *plans.LimitInput) { l.CountWhen = "sometimes" }), "limits[1].count_when"},
		{"CountWhenOnSlidingLog", withTier(func(l *plans.LimitInput) { l.Algorithm = "sliding_window_log"; l.CountWhen = "success" }), "limits[1].count_when"},
		{"CountWhenOnConcurrency", withTier(func(l *plans.LimitInput) { l.Algorithm = "concurrency"; l.CountWhen = "error" }), "limits[1].count_when"},
		{"CostHeaderWithSpace", withTier(func(l *plans.LimitInput) { l.CostHeader = "X Tokens" }), "limits[1].cost_header"},
		{"CostHeaderWithColon", withTier(func(l *plans.LimitInput) { l.CostHeader = "X-Tokens:" }), "limits[1].cost_header"},
		{"CostHeaderTooLong", withTier(func(l *plans.LimitInput) { l.CostHeader = "X-" + strings.Repeat("t", 63) }), "limits[1].cost_header"},
		{"CostHeaderOnSlidingLog", withTier(func(l *plans.LimitInput) { l.Algorithm = "sliding_window_log"; l.CostHeader = "X-Tokens" }), "limits[1].cost_header"},
		{"CountWhenOnLeasedTier", withTier(func(l *plans.LimitInput) { l.Precision = "leased"; l.Limit = 10000; l.CountWhen = "success" }), "limits[1].count_when"},
		{"CostHeaderOnLocalTier", withTier(func(l *plans.LimitInput) { l.Precision = "local"; l.CostHeader = "X-Tokens" }), "limits[1].cost_header"},
		{"DuplicateRouteAlgorithmWindow", withTier(func(l *plans.LimitInput) {
			l.Name = "other"
			l.Route = ""
			l.Algorithm = "token_bucket"
			l.WindowSeconds = 3600
		}), "limits[1].route"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := plans.Validate(tt.in, testRoutes)
			var ve *plans.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Validate = %v, want *ValidationError", err)
			}
			if len(ve.Fields) != 1 || ve.Fields[0].Field != tt.field {
				t.Fatalf("fields = %+v, want exactly one error on %q", ve.Fields, tt.field)
			}
			if ve.Fields[0].Message == "" {
				t.Errorf("error on %q has no message", tt.field)
			}
		})
	}
	if len(tests) < 20 {
		t.Fatalf("only %d invalid cases; the brief asks for at least 20", len(tests))
	}

	t.Run("ReportsEveryFieldAtOnce", func(t *testing.T) {
		p := validPlan()
		p.Slug = "Bad Slug"
		p.Name = ""
		p.Limits[0].WindowSeconds = 0
		p.Limits[1].Algorithm = "nope"
		p.Limits[1].Limit = 0
		err := plans.Validate(p, testRoutes)
		var ve *plans.ValidationError
		if !errors.As(err, &ve) {
			t.Fatalf("Validate = %v, want *ValidationError", err)
		}
		want := []string{"slug", "name", "limits[0].window_seconds", "limits[1].algorithm", "limits[1].limit"}
		if len(ve.Fields) != len(want) {
			t.Fatalf("fields = %+v, want %v", ve.Fields, want)
		}
		for _, f := range want {
			if !ve.Has(f) {
				t.Errorf("missing error on %q in %+v", f, ve.Fields)
			}
		}
	})
}

// TestPolicyNameAsTyped: a tier named with its plan's slug is shown as
// typed, any other is prefixed, and a plan whose two tiers would meet on
// one name is refused naming the second.
func TestPolicyNameAsTyped(t *testing.T) {
	for _, c := range []struct{ plan, tier, want string }{
		{"team", "team-day", "team-day"},
		{"team", "day", "team-day"},
		{"team", "team", "team"},
		{"team", "teams-day", "team-teams-day"},
		{"pro", "search", "pro-search"},
	} {
		if got := plans.PolicyName(c.plan, c.tier); got != c.want {
			t.Errorf("PolicyName(%q, %q) = %q, want %q", c.plan, c.tier, got, c.want)
		}
	}
	in := plans.PlanInput{Slug: "team", Name: "Team", Limits: []plans.LimitInput{
		{Name: "day", Algorithm: "quota", Period: "day", Limit: 10},
		{Name: "team-day", Algorithm: "quota", Period: "month", Limit: 100},
	}}
	err := plans.Validate(in, nil)
	var ve *plans.ValidationError
	if !errors.As(err, &ve) || len(ve.Fields) != 1 || ve.Fields[0].Field != "limits[1].name" || !strings.Contains(ve.Fields[0].Message, `"team-day"`) {
		t.Fatalf("two tiers meeting on team-day: %v", err)
	}
	in.Limits[0].Name = "daily"
	if err := plans.Validate(in, nil); err != nil {
		t.Fatalf("daily and team-day: %v", err)
	}
}
