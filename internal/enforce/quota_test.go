package enforce

import (
	"context"
	"errors"
	"testing"
	"time"
)

func utc(y int, m time.Month, d, h int) time.Time { return time.Date(y, m, d, h, 0, 0, 0, time.UTC) }

func TestPeriodBounds(t *testing.T) {
	cases := []struct {
		name        string
		period      string
		anchor, now time.Time
		start, end  time.Time
	}{
		{"DayFromTheAnchorsTimeOfDay", codeQuotaDay, utc(2026, 3, 5, 14), utc(2026, 11, 30, 9), utc(2026, 11, 29, 14), utc(2026, 11, 30, 14)},
		{"DayAtTheRenewalInstant", codeQuotaDay, utc(2026, 3, 5, 14), utc(2026, 11, 30, 14), utc(2026, 11, 30, 14), utc(2026, 12, 1, 14)},
		{"MonthOnThe31stRenewsOnTheLastDayOfFebruary", codeQuotaMonth, utc(2026, 1, 31, 10), utc(2026, 2, 28, 11), utc(2026, 2, 28, 10), utc(2026, 3, 31, 10)},
		{"MonthOnThe31stBeforeFebruarysRenewal", codeQuotaMonth, utc(2026, 1, 31, 10), utc(2026, 2, 28, 9), utc(2026, 1, 31, 10), utc(2026, 2, 28, 10)},
		{"MonthOnThe31stInALeapFebruary", codeQuotaMonth, utc(2027, 8, 31, 0), utc(2028, 3, 1, 0), utc(2028, 2, 29, 0), utc(2028, 3, 31, 0)},
		{"MonthOnThe30thInApril", codeQuotaMonth, utc(2026, 1, 30, 0), utc(2026, 4, 30, 1), utc(2026, 4, 30, 0), utc(2026, 5, 30, 0)},
		{"MonthAcrossTheYearsEnd", codeQuotaMonth, utc(2025, 6, 15, 0), utc(2027, 1, 3, 0), utc(2026, 12, 15, 0), utc(2027, 1, 15, 0)},
		{"YearOn29FebruaryInAnOrdinaryYear", codeQuotaYear, utc(2028, 2, 29, 12), utc(2029, 3, 1, 0), utc(2029, 2, 28, 12), utc(2030, 2, 28, 12)},
		{"YearOn29FebruaryBackInALeapYear", codeQuotaYear, utc(2028, 2, 29, 12), utc(2032, 2, 29, 13), utc(2032, 2, 29, 12), utc(2033, 2, 28, 12)},
		{"YearBeforeTheAnniversary", codeQuotaYear, utc(2026, 7, 1, 0), utc(2027, 6, 30, 23), utc(2026, 7, 1, 0), utc(2027, 7, 1, 0)},
		{"EpochAnchorIsTheFirstAtMidnight", codeQuotaMonth, time.Unix(0, 0), utc(2026, 5, 17, 8), utc(2026, 5, 1, 0), utc(2026, 6, 1, 0)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, e := periodBounds(tc.period, tc.now.UnixMicro(), tc.anchor.UnixMicro())
			if s != tc.start.UnixMicro() || e != tc.end.UnixMicro() {
				t.Errorf("period = [%s, %s), want [%s, %s)", time.UnixMicro(s).UTC(), time.UnixMicro(e).UTC(), tc.start, tc.end)
			}
		})
	}
}

// quotaCase is a storeCase for a subject anchored at anchor; steps' at are
// offsets from epoch (2027-01-15 08:00 UTC), given here as instants.
type quotaCase struct {
	name   string
	anchor time.Time
	limits []Limit
	steps  []step
}

func quotaCases() []quotaCase {
	since := func(t time.Time) time.Duration { return t.Sub(epoch) }
	month := func(limit int64) []Limit {
		return []Limit{{Name: "monthly", Algorithm: Quota, Period: PeriodMonth, Limit: limit}}
	}
	year := []Limit{{Name: "yearly", Algorithm: Quota, Period: PeriodYear, Limit: 1}}
	day := []Limit{{Name: "daily", Algorithm: Quota, Period: PeriodDay, Limit: 1, Cost: 1}}
	feb27, feb28 := utc(2027, 2, 27, 12), utc(2027, 2, 28, 10)
	return []quotaCase{
		{
			name: "MonthAnchoredOnThe31stRenewsOnTheLastDayOfFebruary", anchor: utc(2026, 10, 31, 10), limits: month(2),
			steps: []step{
				{at: since(feb27), allowed: true, layers: []wantLayer{{true, 1, feb28.Sub(feb27), 0}}},
				{at: since(feb27), allowed: true, layers: []wantLayer{{true, 0, feb28.Sub(feb27), 0}}},
				{at: since(feb27), layers: []wantLayer{{false, 0, feb28.Sub(feb27), feb28.Sub(feb27)}}},
				{at: since(feb28), allowed: true, layers: []wantLayer{{true, 1, utc(2027, 3, 31, 10).Sub(feb28), 0}}},
				// Raised mid-period: what was spent still counts.
				{at: since(feb28), edit: month(3), allowed: true, layers: []wantLayer{{true, 1, utc(2027, 3, 31, 10).Sub(feb28), 0}}},
				{at: since(feb28), allowed: true, layers: []wantLayer{{true, 0, utc(2027, 3, 31, 10).Sub(feb28), 0}}},
				{at: since(feb28), layers: []wantLayer{{false, 0, utc(2027, 3, 31, 10).Sub(feb28), utc(2027, 3, 31, 10).Sub(feb28)}}},
			},
		},
		{
			name: "YearAnchoredOn29FebruaryRenewsOnThe28thThenOnThe29th", anchor: utc(2024, 2, 29, 0), limits: year,
			steps: []step{
				{at: since(utc(2027, 2, 27, 23)), allowed: true, layers: []wantLayer{{true, 0, time.Hour, 0}}},
				{at: since(utc(2027, 2, 27, 23)), layers: []wantLayer{{false, 0, time.Hour, time.Hour}}},
				{at: since(utc(2027, 2, 28, 0)), allowed: true, layers: []wantLayer{{true, 0, 366 * 24 * time.Hour, 0}}},
			},
		},
		{
			name: "DayRenewsAtTheAnchorsTimeOfDay", anchor: time.Date(2026, 12, 1, 14, 30, 0, 0, time.UTC), limits: day,
			steps: []step{
				{at: 0, allowed: true, layers: []wantLayer{{true, 0, 6*time.Hour + 30*time.Minute, 0}}},
				{at: 6 * time.Hour, layers: []wantLayer{{false, 0, 30 * time.Minute, 30 * time.Minute}}},
				{at: 6*time.Hour + 30*time.Minute, allowed: true, layers: []wantLayer{{true, 0, 24 * time.Hour, 0}}},
			},
		},
		{
			// Beside a rate limit, in one decision: a request the rate
			// limit rejects spends nothing of the quota.
			name: "QuotaBesideARateLimit", anchor: time.Unix(0, 0),
			limits: []Limit{{Name: "rate", Algorithm: FixedWindow, Limit: 1, Window: time.Minute}, month(100)[0]},
			steps: []step{
				{at: 0, allowed: true, layers: []wantLayer{{true, 0, time.Minute, 0}, {true, 99, utc(2027, 2, 1, 0).Sub(epoch), 0}}},
				{at: 0, layers: []wantLayer{{false, 0, time.Minute, time.Minute}, {true, 99, utc(2027, 2, 1, 0).Sub(epoch), 0}}},
				{at: time.Minute, allowed: true, layers: []wantLayer{{true, 0, time.Minute, 0}, {true, 98, utc(2027, 2, 1, 0).Sub(epoch) - time.Minute, 0}}},
			},
		},
	}
}

func TestStoresAgreeOnQuotas(t *testing.T) {
	for _, kind := range storeKinds() {
		t.Run(kind.name, func(t *testing.T) {
			for _, tc := range quotaCases() {
				t.Run(tc.name, func(t *testing.T) {
					clock := newFakeClock()
					store := kind.new(t, clock)
					runAnchoredSteps(t, store, clock, "subject:"+tc.name, tc.anchor, tc.limits, tc.steps)
				})
			}
		})
	}
}

// quotaAdjuster is what both stores offer besides Store.
type quotaAdjuster interface {
	Store
	GrantQuota(ctx context.Context, req Request, units int64) (LayerResult, error)
	ResetQuota(ctx context.Context, req Request) (LayerResult, error)
}

func TestStoresAgreeOnQuotaGrantsAndResets(t *testing.T) {
	// 3 a month from the 1st: spent, topped up by 2 that go with the
	// period, then a reset in the next period.
	limits := []Limit{{Name: "monthly", Algorithm: Quota, Period: PeriodMonth, Limit: 3}}
	feb := utc(2027, 2, 1, 0)
	for _, kind := range storeKinds() {
		t.Run(kind.name, func(t *testing.T) {
			clock := newFakeClock()
			store := kind.new(t, clock).(quotaAdjuster)
			ctx := context.Background()
			req := Request{Subject: "dev:1", Limits: limits}
			allow := func(want bool, remaining int64) {
				t.Helper()
				d, err := store.Allow(ctx, req)
				if err != nil || d.Allowed != want || d.Layers[0].Remaining != remaining {
					t.Fatalf("Allow = %v remaining %d (%v), want %v remaining %d", d.Allowed, d.Layers[0].Remaining, err, want, remaining)
				}
			}
			allow(true, 2)
			allow(true, 1)
			allow(true, 0)
			allow(false, 0)
			l, err := store.GrantQuota(ctx, req, 2)
			if err != nil || l.Remaining != 2 || !l.Allowed || l.ResetAfter != feb.Sub(epoch) {
				t.Fatalf("GrantQuota = %+v, %v; want 2 remaining until the renewal", l, err)
			}
			allow(true, 1)
			allow(true, 0)
			allow(false, 0)
			// Renewed: the grant went with its period.
			clock.Set(feb)
			allow(true, 2)
			allow(true, 1)
			l, err = store.ResetQuota(ctx, req)
			if err != nil || l.Remaining != 3 {
				t.Fatalf("ResetQuota = %+v, %v; want 3 remaining", l, err)
			}
			allow(true, 2)
			t.Run("RefusesAnythingButOneQuota", func(t *testing.T) {
				bad := Request{Subject: "dev:1", Limits: []Limit{{Name: "fw", Algorithm: FixedWindow, Limit: 1, Window: time.Minute}}}
				if _, err := store.ResetQuota(ctx, bad); !errors.Is(err, ErrInvalidRequest) {
					t.Errorf("ResetQuota(fixed window) = %v, want ErrInvalidRequest", err)
				}
				if _, err := store.GrantQuota(ctx, req, 0); !errors.Is(err, ErrInvalidRequest) {
					t.Errorf("GrantQuota(0) = %v, want ErrInvalidRequest", err)
				}
			})
		})
	}
}
