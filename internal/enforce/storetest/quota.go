package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
)

func quotaCases() []quotaCase {
	since := func(t time.Time) time.Duration { return t.Sub(Epoch) }
	month := func(limit int64) []enforce.Limit {
		return []enforce.Limit{{Name: "monthly", Algorithm: enforce.Quota, Period: enforce.PeriodMonth, Limit: limit}}
	}
	year := []enforce.Limit{{Name: "yearly", Algorithm: enforce.Quota, Period: enforce.PeriodYear, Limit: 1}}
	day := []enforce.Limit{{Name: "daily", Algorithm: enforce.Quota, Period: enforce.PeriodDay, Limit: 1, Cost: 1}}
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
			limits: []enforce.Limit{{Name: "rate", Algorithm: enforce.FixedWindow, Limit: 1, Window: time.Minute}, month(100)[0]},
			steps: []step{
				{at: 0, allowed: true, layers: []wantLayer{{true, 0, time.Minute, 0}, {true, 99, utc(2027, 2, 1, 0).Sub(Epoch), 0}}},
				{at: 0, layers: []wantLayer{{false, 0, time.Minute, time.Minute}, {true, 99, utc(2027, 2, 1, 0).Sub(Epoch), 0}}},
				{at: time.Minute, allowed: true, layers: []wantLayer{{true, 0, time.Minute, 0}, {true, 98, utc(2027, 2, 1, 0).Sub(Epoch) - time.Minute, 0}}},
			},
		},
	}
}

func testStoresAgreeOnQuotas(t *testing.T, kinds []Kind) {
	for _, kind := range kinds {
		t.Run(kind.Name, func(t *testing.T) {
			for _, tc := range quotaCases() {
				t.Run(tc.name, func(t *testing.T) {
					clock := NewClock()
					store := kind.New(t, clock)
					runAnchoredSteps(t, store, clock, "subject:"+tc.name, tc.anchor, tc.limits, tc.steps)
				})
			}
		})
	}
}

// quotaAdjuster is what both stores offer besides Store.
type quotaAdjuster interface {
	enforce.Store
	GrantQuota(ctx context.Context, req enforce.Request, units int64) (enforce.LayerResult, error)
	ResetQuota(ctx context.Context, req enforce.Request) (enforce.LayerResult, error)
}

func testStoresAgreeOnQuotaGrantsAndResets(t *testing.T, kinds []Kind) {
	// 3 a month from the 1st: spent, topped up by 2 that go with the
	// period, then a reset in the next period.
	limits := []enforce.Limit{{Name: "monthly", Algorithm: enforce.Quota, Period: enforce.PeriodMonth, Limit: 3}}
	feb := utc(2027, 2, 1, 0)
	for _, kind := range kinds {
		t.Run(kind.Name, func(t *testing.T) {
			clock := NewClock()
			store, ok := kind.New(t, clock).(quotaAdjuster)
			if !ok {
				t.Skipf("%s offers no quota adjustments", kind.Name)
			}
			ctx := context.Background()
			req := enforce.Request{Subject: "dev:1", Limits: limits}
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
			if err != nil || l.Remaining != 2 || !l.Allowed || l.ResetAfter != feb.Sub(Epoch) {
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
				bad := enforce.Request{Subject: "dev:1", Limits: []enforce.Limit{{Name: "fw", Algorithm: enforce.FixedWindow, Limit: 1, Window: time.Minute}}}
				if _, err := store.ResetQuota(ctx, bad); !errors.Is(err, enforce.ErrInvalidRequest) {
					t.Errorf("ResetQuota(fixed window) = %v, want ErrInvalidRequest", err)
				}
				if _, err := store.GrantQuota(ctx, req, 0); !errors.Is(err, enforce.ErrInvalidRequest) {
					t.Errorf("GrantQuota(0) = %v, want ErrInvalidRequest", err)
				}
			})
		})
	}
}

func utc(y int, m time.Month, d, h int) time.Time { return time.Date(y, m, d, h, 0, 0, 0, time.UTC) }

// quotaCase is a storeCase for a subject anchored at anchor; steps' at are
// offsets from epoch (2027-01-15 08:00 UTC), given here as instants.
type quotaCase struct {
	name   string
	anchor time.Time
	limits []enforce.Limit
	steps  []step
}
