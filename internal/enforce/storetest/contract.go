package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
)

// usageReader is what both stores offer the dashboards.
type usageReader interface {
	Usage(ctx context.Context, subjects []string, since time.Time) ([]enforce.UsagePoint, error)
}

func testStoresRejectInvalidRequests(t *testing.T, kinds []Kind) {
	ok := enforce.Limit{Name: "a", Algorithm: enforce.FixedWindow, Limit: 1, Window: time.Second}
	cases := []struct {
		name string
		req  enforce.Request
	}{
		{"EmptySubject", enforce.Request{Limits: []enforce.Limit{ok}}},
		{"BraceInSubject", enforce.Request{Subject: "key:{1}", Limits: []enforce.Limit{ok}}},
		{"NoLimits", enforce.Request{Subject: "key:1"}},
		{"DuplicateName", enforce.Request{Subject: "key:1", Limits: []enforce.Limit{ok, ok}}},
		{"UnknownAlgorithm", enforce.Request{Subject: "key:1", Limits: []enforce.Limit{{Name: "a", Algorithm: "gcra", Limit: 1, Window: time.Second}}}},
		{"ZeroLimit", enforce.Request{Subject: "key:1", Limits: []enforce.Limit{{Name: "a", Algorithm: enforce.FixedWindow, Window: time.Second}}}},
		{"ZeroWindow", enforce.Request{Subject: "key:1", Limits: []enforce.Limit{{Name: "a", Algorithm: enforce.FixedWindow, Limit: 1}}}},
		{"NegativeCost", enforce.Request{Subject: "key:1", Limits: []enforce.Limit{{Name: "a", Algorithm: enforce.FixedWindow, Limit: 1, Window: time.Second, Cost: -1}}}},
	}
	for _, kind := range kinds {
		t.Run(kind.Name, func(t *testing.T) {
			store := kind.New(t, NewClock())
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					if _, err := store.Allow(context.Background(), tc.req); !errors.Is(err, enforce.ErrInvalidRequest) {
						t.Errorf("Allow = %v, want ErrInvalidRequest", err)
					}
					if _, err := store.Peek(context.Background(), tc.req); !errors.Is(err, enforce.ErrInvalidRequest) {
						t.Errorf("Peek = %v, want ErrInvalidRequest", err)
					}
				})
			}
		})
	}
}

func testStoresCountUsage(t *testing.T, kinds []Kind) {
	limits := []enforce.Limit{{Name: "fw", Algorithm: enforce.FixedWindow, Limit: 2, Window: time.Hour}}
	for _, kind := range kinds {
		t.Run(kind.Name, func(t *testing.T) {
			clock := NewClock()
			store := kind.New(t, clock)
			if _, ok := store.(usageReader); !ok {
				t.Skipf("%s keeps no usage counts", kind.Name)
			}
			ctx := context.Background()
			do := func(at time.Duration, subject, route string, peek bool) {
				clock.Set(Epoch.Add(at))
				req := enforce.Request{Subject: subject, Route: route, Limits: limits}
				var err error
				if peek {
					_, err = store.Peek(ctx, req)
				} else {
					_, err = store.Allow(ctx, req)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			do(1*time.Second, "key:1", "GET /a", false)  // admitted
			do(2*time.Second, "key:1", "GET /b", false)  // admitted
			do(3*time.Second, "key:1", "GET /a", false)  // rejected
			do(4*time.Second, "key:1", "GET /a", true)   // peek: not counted
			do(12*time.Second, "key:1", "GET /a", false) // rejected, next bucket
			do(5*time.Second, "key:2", "GET /a", false)  // another subject
			do(5*time.Second, "key:3", "GET /a", false)  // not asked for
			clock.Set(Epoch.Add(15 * time.Second))
			got, err := store.(usageReader).Usage(ctx, []string{"key:1", "key:2"}, Epoch)
			if err != nil {
				t.Fatal(err)
			}
			b0, b1 := Epoch.UTC(), Epoch.Add(enforce.UsageBucket).UTC()
			want := []enforce.UsagePoint{
				{Subject: "key:1", Route: "GET /a", Bucket: b0, Admitted: 1, Rejected: 1},
				{Subject: "key:1", Route: "GET /a", Bucket: b1, Admitted: 0, Rejected: 1},
				{Subject: "key:1", Route: "GET /b", Bucket: b0, Admitted: 1, Rejected: 0},
				{Subject: "key:2", Route: "GET /a", Bucket: b0, Admitted: 1, Rejected: 0},
			}
			if len(got) != len(want) {
				t.Fatalf("Usage = %+v, want %+v", got, want)
			}
			for i := range want {
				if got[i] != want[i] {
					t.Errorf("point %d = %+v, want %+v", i, got[i], want[i])
				}
			}
			t.Run("SinceSkipsOlderBuckets", func(t *testing.T) {
				got, err := store.(usageReader).Usage(ctx, []string{"key:1"}, Epoch.Add(11*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != 1 || got[0] != want[1] {
					t.Errorf("Usage since +11s = %+v, want [%+v]", got, want[1])
				}
			})
		})
	}
}
