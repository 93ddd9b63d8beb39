package docs_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/docs"
	"github.com/sluicehq/sluice/internal/enforce"
)

// TestPrecisionBound: the line states enforce.LeaseBounds' figures for each
// precision and algorithm kind, and says so when a limit is too small to
// lease.
func TestPrecisionBound(t *testing.T) {
	log := enforce.Limit{Name: "x", Algorithm: enforce.SlidingWindowLog, Limit: 2000, Window: time.Minute, Cost: 1}
	with := func(l enforce.Limit, p enforce.Precision) enforce.Limit { l.Precision = p; return l }
	fixed := log
	fixed.Algorithm = enforce.FixedWindow
	quota := enforce.Limit{Name: "q", Algorithm: enforce.Quota, Period: enforce.PeriodMonth, Limit: 100000, Cost: 1}
	for _, tc := range []struct {
		name      string
		l         enforce.Limit
		instances int
		want      string
	}{
		{"Exact", log, 2, "exact: every request decided in Redis"},
		{"LeasedLog", with(log, enforce.PrecisionLeased), 2, "leased: at most 40 over, at most 40 under the limit per window with 2 instances; leases of up to 20"},
		{"LeasedFixedWindowNeverOver", with(fixed, enforce.PrecisionLeased), 4, "leased: never over, at most 40 under the limit per window with 4 instances; leases of up to 10"},
		{"LeasedQuotaPerPeriod", with(quota, enforce.PrecisionLeased), 1, "leased: never over, at most 2000 under the limit per period with 1 instance; leases of up to 2000"},
		{"LeasedTooSmall", with(enforce.Limit{Name: "s", Algorithm: enforce.TokenBucket, Limit: 10, Window: time.Minute, Cost: 1}, enforce.PrecisionLeased), 2,
			"leased: too small to lease with 2 instances, so every request is decided exactly"},
		{"LocalOne", with(log, enforce.PrecisionLocal), 1, "local: the one instance enforces 2000 on its own, no Redis"},
		{"LocalRoundsUp", with(enforce.Limit{Name: "r", Algorithm: enforce.TokenBucket, Limit: 10, Window: time.Minute, Cost: 1}, enforce.PrecisionLocal), 3,
			"local: each of 3 instances enforces 4 on its own, no Redis; a caller reaching one instance gets 4, all together at most 2 over"},
		{"ZeroInstancesIsOne", with(log, enforce.PrecisionLeased), 0, "leased: at most 40 over, at most 40 under the limit per window with 1 instance; leases of up to 40"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := docs.PrecisionBound(tc.l, tc.instances); got != tc.want {
				t.Errorf("PrecisionBound = %q\n                  want %q", got, tc.want)
			}
		})
	}
}
