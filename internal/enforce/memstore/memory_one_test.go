package memstore

import (
	"context"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/storetest"
)

// TestMemoryStoreOneLimitPathDecidesAsTheGeneralPath runs one sequence of
// requests through allowOne (a cached one-limit set) and through
// decideWith (the general path, keys not cached), each on a store of its
// own, and wants the same decisions, counter state, last write and guard
// after every request, for every counter algorithm, with layers exhausted
// and refilled.
func TestMemoryStoreOneLimitPathDecidesAsTheGeneralPath(t *testing.T) {
	const subject = "key:one"
	for _, tc := range []struct {
		name  string
		limit enforce.Limit
		gap   time.Duration // arrivals are 0 to gap apart
	}{
		{"FixedWindow", enforce.Limit{Name: "l", Algorithm: enforce.FixedWindow, Limit: 5, Window: time.Second}, 300 * time.Millisecond},
		{"SlidingWindowCounter", enforce.Limit{Name: "l", Algorithm: enforce.SlidingWindowCounter, Limit: 5, Window: time.Second}, 300 * time.Millisecond},
		{"TokenBucket", enforce.Limit{Name: "l", Algorithm: enforce.TokenBucket, Limit: 4, Window: time.Second, Burst: 3}, 400 * time.Millisecond},
		{"TokenBucketCost2", enforce.Limit{Name: "l", Algorithm: enforce.TokenBucket, Limit: 7, Window: 3 * time.Second, Burst: 5, Cost: 2}, 500 * time.Millisecond},
		{"LeakyBucket", enforce.Limit{Name: "l", Algorithm: enforce.LeakyBucket, Limit: 4, Window: time.Second, Burst: 2}, 400 * time.Millisecond},
		{"LeakyBucketQueue", enforce.Limit{Name: "l", Algorithm: enforce.LeakyBucket, Limit: 4, Window: time.Second, Burst: 2, Mode: enforce.ModeQueue}, 400 * time.Millisecond},
		{"TokenBucketShadow", enforce.Limit{Name: "l", Algorithm: enforce.TokenBucket, Limit: 4, Window: time.Second, Burst: 2, Mode: enforce.ModeShadow}, 400 * time.Millisecond},
		{"QuotaDay", enforce.Limit{Name: "l", Algorithm: enforce.Quota, Period: enforce.PeriodDay, Limit: 5}, 5 * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			clock := storetest.NewClock()
			fast := New(Options{Now: clock.Now})
			general := New(Options{Now: clock.Now})
			limits := []enforce.Limit{tc.limit}
			ps, err := enforce.CompileLimits(limits, nil)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(7, 7))
			now := storetest.Epoch
			var took, admitted, rejected int
			for i := range 400 {
				now = now.Add(time.Duration(rng.Int64N(int64(tc.gap))))
				clock.Set(now)
				req := enforce.Request{Subject: subject, Route: "GET /x", Limits: limits}
				var got enforce.Decision
				if set := fast.sets.get(limits); set != nil && set.oneCounter && fast.allowOne(&got, &req, set, nil) {
					took++
				} else if got, err = fast.Allow(ctx, req); err != nil {
					t.Fatal(err)
				}
				var want enforce.Decision
				if err := general.decideCompiled(&want, &req, ps, nil, true, nil); err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("request %d at +%s: one-limit path %+v, general path %+v", i, now.Sub(storetest.Epoch), got, want)
				}
				if got.Allowed {
					admitted++
				} else {
					rejected++
				}
				a, b := stateOf(fast, subject), stateOf(general, subject)
				if a.lim0.counter != b.lim0.counter || a.last != b.last || a.guard != b.guard {
					t.Fatalf("request %d at +%s: one-limit path left counter %+v last %d guard %d, general path %+v %d %d",
						i, now.Sub(storetest.Epoch), a.lim0.counter, a.last, a.guard, b.lim0.counter, b.last, b.guard)
				}
			}
			if took < 300 {
				t.Errorf("allowOne decided %d of 400 requests, want most", took)
			}
			if tc.limit.Mode != enforce.ModeShadow && (admitted < 40 || rejected < 40) {
				t.Errorf("%d admitted, %d rejected: the sequence did not exercise both outcomes", admitted, rejected)
			}
		})
	}
}

// stateOf is subject's state in s, or nil.
func stateOf(s *Store, subject string) *subjectState {
	sh, h := s.locate(subject)
	return sh.get(h, subject)
}

// TestMemoryStoreOneLimitPathAdoptsEqualLimits: two slices of equal limits
// taking turns on a subject both take allowOne; a slice whose limit has
// other figures does not (decideWith rescales the state), nor one naming
// another limit.
func TestMemoryStoreOneLimitPathAdoptsEqualLimits(t *testing.T) {
	ctx := context.Background()
	clock := storetest.NewClock()
	store := New(Options{Now: clock.Now})
	limit := enforce.Limit{Name: "l", Algorithm: enforce.TokenBucket, Limit: 100, Window: time.Second}
	a, b := []enforce.Limit{limit}, []enforce.Limit{limit}
	edited, renamed := []enforce.Limit{limit}, []enforce.Limit{limit}
	edited[0].Burst = 50
	renamed[0].Name = "m"
	// Seen twice, a slice is cached.
	for _, limits := range [][]enforce.Limit{a, a, b, b, edited, edited, renamed, renamed} {
		if _, err := store.Allow(ctx, enforce.Request{Subject: "key:a", Limits: limits}); err != nil {
			t.Fatal(err)
		}
	}
	allowOne := func(limits []enforce.Limit) bool {
		t.Helper()
		set := store.sets.get(limits)
		if set == nil || !set.oneCounter {
			t.Fatal("limit set not cached")
		}
		var d enforce.Decision
		return store.allowOne(&d, &enforce.Request{Subject: "key:a", Limits: limits}, set, nil)
	}
	if _, err := store.Allow(ctx, enforce.Request{Subject: "key:a", Limits: a}); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if !allowOne(b) {
			t.Fatalf("turn %d: allowOne refused a slice equal to the state's", i)
		}
		if !allowOne(a) {
			t.Fatalf("turn %d: allowOne refused the state's own slice after an equal one", i)
		}
	}
	if allowOne(edited) {
		t.Error("allowOne decided a limit of other figures over the state, want decideWith to rescale it")
	}
	if allowOne(renamed) {
		t.Error("allowOne decided another limit over the state")
	}
}
