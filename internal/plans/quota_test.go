package plans_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/plans"
)

func TestQuotaTiers(t *testing.T) {
	s, _ := newService(t)
	ctx := context.Background()
	p := mustCreate(t, s, validPlan())
	monthly := plans.LimitInput{Name: "monthly", Algorithm: "quota", Period: "month", Limit: 10000}
	p2, err := s.AddLimit(ctx, actor, p.ID, p.Version, monthly)
	if err != nil {
		t.Fatalf("AddLimit(quota): %v", err)
	}
	got := p2.Limits[len(p2.Limits)-1]
	if got.Algorithm != enforce.Quota || got.Period != enforce.PeriodMonth || got.Limit != 10000 {
		t.Fatalf("stored quota = %+v", got)
	}
	l := got.Enforce(p.Slug)
	if l.Algorithm != enforce.Quota || l.Period != enforce.PeriodMonth || l.PerKey {
		t.Errorf("engine limit = %+v, want a plan-wide monthly quota", l)
	}
	// A daily quota beside it is no duplicate.
	daily := monthly
	daily.Name, daily.Period = "daily", "day"
	if _, err := s.AddLimit(ctx, actor, p.ID, p2.Version, daily); err != nil {
		t.Errorf("AddLimit(daily beside monthly): %v", err)
	}

	cases := []struct {
		name  string
		in    plans.LimitInput
		field string
	}{
		{"QuotaWithoutPeriod", plans.LimitInput{Name: "q", Algorithm: "quota", Limit: 5}, "period"},
		{"QuotaWithUnknownPeriod", plans.LimitInput{Name: "q", Algorithm: "quota", Period: "week", Limit: 5}, "period"},
		{"PeriodOnAWindow", plans.LimitInput{Name: "q", Algorithm: "fixed_window", Period: "day", Limit: 5, WindowSeconds: 60}, "period"},
		{"QuotaWithBurst", plans.LimitInput{Name: "q", Algorithm: "quota", Period: "day", Limit: 5, Burst: 2}, "burst"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			errs := plans.ValidateLimit("", tc.in, nil)
			if len(errs) != 1 || errs[0].Field != tc.field {
				t.Errorf("ValidateLimit = %+v, want one error on %s", errs, tc.field)
			}
			var ve *plans.ValidationError
			if _, err := s.AddLimit(ctx, actor, p.ID, p2.Version+1, tc.in); !errors.As(err, &ve) {
				t.Errorf("AddLimit = %v, want a validation error", err)
			}
		})
	}
}
