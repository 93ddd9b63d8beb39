package memstore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/storetest"
)

// TestMemoryUsageKeepsItsRetention: a subject busy on two routes for 80
// minutes, a decision every 5 seconds alternating between them, keeps one
// entry per route and bucket, exact, and none older than UsageRetention.
func TestMemoryUsageKeepsItsRetention(t *testing.T) {
	clock := storetest.NewClock()
	store := New(Options{Now: clock.Now})
	limits := []enforce.Limit{{Name: "l", Algorithm: enforce.FixedWindow, Limit: 1 << 40, Window: time.Minute}}
	ctx := context.Background()
	const span, step = 80 * time.Minute, 5 * time.Second
	routes := []string{"GET /a", "GET /b"}
	for at, i := time.Duration(0), 0; at < span; at, i = at+step, i+1 {
		clock.Set(storetest.Epoch.Add(at))
		if _, err := store.Allow(ctx, enforce.Request{Subject: "key:1", Route: routes[i%2], Limits: limits}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := store.Usage(ctx, []string{"key:1"}, storetest.Epoch)
	if err != nil {
		t.Fatal(err)
	}
	// Each 10-second bucket saw one decision on each route.
	last := storetest.Epoch.Add(span - step).Truncate(enforce.UsageBucket)
	oldest := last.Add(-enforce.UsageRetention)
	buckets := map[string]int{}
	for _, p := range got {
		if p.Admitted != 1 || p.Rejected != 0 {
			t.Errorf("%s %s: admitted %d rejected %d, want 1 0", p.Route, p.Bucket, p.Admitted, p.Rejected)
		}
		if p.Bucket.Before(oldest) {
			t.Errorf("%s %s: older than the retention (oldest kept %s)", p.Route, p.Bucket, oldest)
		}
		buckets[p.Route]++
	}
	want := int(enforce.UsageRetention/enforce.UsageBucket) + 1 // the retention and the bucket under way
	for _, r := range routes {
		if buckets[r] < want-1 || buckets[r] > want {
			t.Errorf("route %s: %d buckets kept, want %d (or one fewer, trimmed as the bucket turned)", r, buckets[r], want)
		}
	}
}

// TestMemoryUsageRoutesStayBounded: routes beyond maxUsageRoutes (a
// gateway can pass any) are counted together under otherRoutes rather than
// each interned.
func TestMemoryUsageRoutesStayBounded(t *testing.T) {
	store := New(Options{MaxSubjects: 2 * maxUsageRoutes})
	limits := []enforce.Limit{{Name: "l", Algorithm: enforce.FixedWindow, Limit: 1 << 40, Window: time.Hour}}
	ctx := context.Background()
	n := maxUsageRoutes + 10
	for i := range n {
		req := enforce.Request{Subject: "key:" + strconv.Itoa(i), Route: "GET /r" + strconv.Itoa(i), Limits: limits}
		if _, err := store.Allow(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(store.routes.names); got != maxUsageRoutes {
		t.Errorf("%d routes interned, want %d", got, maxUsageRoutes)
	}
	for _, tc := range []struct {
		subject, route string
	}{
		{"key:0", "GET /r0"},
		{"key:" + strconv.Itoa(maxUsageRoutes-2), "GET /r" + strconv.Itoa(maxUsageRoutes-2)},
		{"key:" + strconv.Itoa(maxUsageRoutes-1), otherRoutes},
		{"key:" + strconv.Itoa(n-1), otherRoutes},
	} {
		got, err := store.Usage(ctx, []string{tc.subject}, time.Now().Add(-time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].Route != tc.route || got[0].Admitted != 1 {
			t.Errorf("Usage(%s) = %+v, want one point on %q", tc.subject, got, tc.route)
		}
	}
}
