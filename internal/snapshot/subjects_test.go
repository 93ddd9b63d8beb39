package snapshot_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/enforce/httplimit"
	"github.com/sluicehq/sluice/internal/enforce/redisstore"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/snapshot"
	"github.com/sluicehq/sluice/internal/testenv"
)

// TestPlanLimitsDoNotMultiply runs the snapshot's callers through the
// middleware on the shared Redis store, as cmd/portal does, and counts
// admissions: a developer's keys share the plan-wide limit while each
// key keeps its own endpoint tier, and the addresses of one IPv6 /64 share
// one anonymous budget.
func TestPlanLimitsDoNotMultiply(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	// A plan whose plan-wide limit (6) is smaller than two keys' tiers (4
	// each), so sharing shows.
	team, err := f.plans.Create(ctx, actor, plans.PlanInput{Slug: "team", Name: "Team", Limits: []plans.LimitInput{
		{Name: "global", Algorithm: "fixed_window", Limit: 6, WindowSeconds: 3600},
		{Name: "search", Route: "GET /api/search", Algorithm: "fixed_window", Limit: 4, WindowSeconds: 3600},
	}})
	if err != nil {
		t.Fatal(err)
	}
	dev := f.user(t, "team@example.com", &team.ID)
	h := f.holder(t, snapshot.Options{})
	run(t, h)
	client, prefix := testenv.Redis(t)
	store, err := redisstore.New(client, redisstore.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	mw := httplimit.NewMiddleware(store, h, httplimit.Options{})
	mux := http.NewServeMux()
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	mux.Handle("GET /api/search", mw.Wrap(ok))
	mux.Handle("GET /api/items/{id}", mw.Wrap(ok))
	call := func(path, secret, addr string) int {
		r := httptest.NewRequest("GET", path, nil)
		r.RemoteAddr = addr
		if secret != "" {
			r.Header.Set("Authorization", "Bearer "+secret)
		}
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		return w.Code
	}

	_, first := f.key(t, apikeys.NewKey{UserID: dev, Name: "first"})
	_, second := f.key(t, apikeys.NewKey{UserID: dev, Name: "second"})
	eventually(t, h, 5*time.Second, func() bool { _, err := h.ResolveKey(second); return err == nil })

	t.Run("KeysOfOneDeveloperShareThePlanWideLimit", func(t *testing.T) {
		admitted := map[string]int{}
		for i := range 12 {
			name, secret := "first", first
			if i%2 == 1 {
				name, secret = "second", second
			}
			if call("/api/items/1", secret, "198.51.100.1:1") == http.StatusOK {
				admitted[name]++
			}
		}
		if admitted["first"]+admitted["second"] != 6 {
			t.Fatalf("admitted %v over two keys, want 6 in all: the plan-wide limit is the developer's", admitted)
		}
	})
	t.Run("EndpointTierCountsPerKey", func(t *testing.T) {
		// The developer's plan-wide budget is spent: a third key of theirs
		// gets nothing anywhere.
		_, third := f.key(t, apikeys.NewKey{UserID: dev, Name: "third"})
		eventually(t, h, 5*time.Second, func() bool { _, err := h.ResolveKey(third); return err == nil })
		if got := call("/api/search?q=x", third, "198.51.100.1:1"); got != http.StatusTooManyRequests {
			t.Fatalf("a new key of a developer over the plan-wide limit: %d, want 429", got)
		}
		// Another developer on the same plan has a budget of their own.
		other := f.user(t, "other@example.com", &team.ID)
		_, a := f.key(t, apikeys.NewKey{UserID: other, Name: "a"})
		_, b := f.key(t, apikeys.NewKey{UserID: other, Name: "b"})
		eventually(t, h, 5*time.Second, func() bool { _, err := h.ResolveKey(b); return err == nil })
		search := func(secret string) int {
			n := 0
			for range 6 {
				if call("/api/search?q=x", secret, "198.51.100.1:1") == http.StatusOK {
					n++
				}
			}
			return n
		}
		// Key a spends its own tier of 4; key b then gets the 2 left of
		// the developer's 6, not its own 4.
		if got := search(a); got != 4 {
			t.Fatalf("key a admitted %d on search, want its tier's 4", got)
		}
		if got := search(b); got != 2 {
			t.Fatalf("key b admitted %d on search, want the 2 left of the developer's 6", got)
		}
	})
	t.Run("AddressesOfOneIPv6BlockShareTheAnonymousBudget", func(t *testing.T) {
		admitted := 0
		for i := range 30 {
			// Thirty addresses of 2001:db8:1:2::/64, one request each.
			addr := "[2001:db8:1:2::" + strconv.FormatInt(int64(i+1), 16) + "]:4000"
			if call("/api/items/1", "", addr) == http.StatusOK {
				admitted++
			}
		}
		if admitted != 10 {
			t.Fatalf("admitted %d over 30 addresses of one /64, want the anonymous plan's 10", admitted)
		}
		if got := call("/api/items/1", "", "[2001:db8:1:3::1]:4000"); got != http.StatusOK {
			t.Fatalf("another /64: %d, want 200 (a budget of its own)", got)
		}
	})
}
