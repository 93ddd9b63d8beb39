package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/gateway"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/services"
	"github.com/sluicehq/sluice/internal/snapshot"
)

// searchLimit is the tier on searchRoute of the plan declareSearch makes.
const (
	searchLimit = 10
	searchRoute = "GET /api/search"
)

// spellings are ways to write the path /api/search that servers route to
// the search handler (issue 30, item 6): each must count under its route.
var spellings = []string{
	"/api/search?q=lantern",
	"/api/search;x=1",
	"/api/search/",
	"/API/search",
	"/api//search",
	"/api/%73earch",
	"/api/./search",
	"/x/../api/search",
	"/api/search/..;/search",
	"/api%2Fsearch",
}

// declareSearch gives the demo service (declared by the migrations, with
// searchRoute among its routes) the upstream api, and makes a plan
// limiting searchRoute to searchLimit an hour.
func (f *fixture) declareSearch(t *testing.T, api *upstream) plans.Plan {
	t.Helper()
	ctx := context.Background()
	demo, err := f.services.Get(ctx, services.DemoSlug)
	if err != nil {
		t.Fatal(err)
	}
	in := services.Input{Slug: demo.Slug, Name: demo.Name, Hosts: demo.Hosts, Upstream: api.URL, Routes: demo.Routes}
	if _, err := f.services.Update(ctx, actor, demo.Slug, demo.Version, in); err != nil {
		t.Fatal(err)
	}
	p, err := f.plans.Create(ctx, actor, plans.PlanInput{Slug: "searcher", Name: "Searcher",
		Limits: []plans.LimitInput{{Name: "search", Route: searchRoute, Algorithm: "fixed_window",
			Limit: searchLimit, WindowSeconds: 3600}}})
	if err != nil {
		t.Fatal(err)
	}
	f.waitFor(t, func(s *snapshot.Snapshot) bool {
		svc, ok := s.Services().Service(services.DemoSlug)
		return ok && svc.Upstream == api.URL
	})
	return p
}

// newDeveloperKey creates a developer with a key on plan and waits until
// the snapshot resolves it: every spelling gets counters of its own.
func (f *fixture) newDeveloperKey(t *testing.T, plan plans.Plan, email string) string {
	t.Helper()
	ctx := context.Background()
	var dev int64
	if err := f.pool.QueryRow(ctx, `INSERT INTO users (email, password_hash, role) VALUES ($1, 'x', 'developer') RETURNING id`, email).Scan(&dev); err != nil {
		t.Fatal(err)
	}
	_, secret, err := f.keys.Create(ctx, actor, apikeys.NewKey{UserID: dev, Name: "spelling", PlanID: &plan.ID})
	if err != nil {
		t.Fatal(err)
	}
	f.waitFor(t, func(*snapshot.Snapshot) bool { _, err := f.holder.ResolveKey(secret); return err == nil })
	return secret
}

// TestSpellingsCountUnderTheRoute sends 25 requests in each spelling of
// /api/search, with a key of its own, through each way in that matches
// declared routes, and counts admissions: exactly the tier's 10, as
// /api/search itself gets.
func TestSpellingsCountUnderTheRoute(t *testing.T) {
	const sent = 25
	f := newFixture(t, nil)
	api := newUpstream(t)
	plan := f.declareSearch(t, api)
	check := gateway.NewCheck(f.catalogs(), f.mw, f.logger)
	rls := rlsClient(t, f)
	proxy := f.proxyServer(t)

	ways := []struct {
		name string
		// admitted sends one request through the way in and says whether
		// it was admitted; a status other than admitted or 429 fails.
		admitted func(t *testing.T, uri, key string) bool
	}{
		{"Check", func(t *testing.T, uri, key string) bool {
			r := httptest.NewRequest("GET", gateway.CheckPath, nil)
			r.RemoteAddr = "127.0.0.1:5000"
			r.Header.Set("X-Original-Method", "GET")
			r.Header.Set("X-Original-URI", uri)
			r.Header.Set("X-API-Key", key)
			w := httptest.NewRecorder()
			check.ServeHTTP(w, r)
			return admittedStatus(t, w.Code)
		}},
		{"Envoy", func(t *testing.T, uri, key string) bool {
			res, err := rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: services.DemoSlug,
				Descriptors: []*rlv3.RateLimitDescriptor{envoyDescriptor("GET", uri, key)}})
			if err != nil {
				t.Fatal(err)
			}
			return res.GetOverallCode() == rlsv3.RateLimitResponse_OK
		}},
		{"Proxy", func(t *testing.T, uri, key string) bool {
			res := get(t, "GET", proxy.URL+gateway.ProxyPrefix+services.DemoSlug+uri, key)
			res.Body.Close()
			return admittedStatus(t, res.StatusCode)
		}},
	}
	for _, way := range ways {
		t.Run(way.name, func(t *testing.T) {
			for i, uri := range append([]string{"/api/search"}, spellings...) {
				key := f.newDeveloperKey(t, plan, fmt.Sprintf("%s-%d@example.com", way.name, i))
				admitted := 0
				for range sent {
					if way.admitted(t, uri, key) {
						admitted++
					}
				}
				if admitted != searchLimit {
					t.Errorf("%q: %d of %d admitted, want %d", uri, admitted, sent, searchLimit)
				}
			}
		})
	}
}

// admittedStatus is true for 200 and false for 429; anything else fails.
func admittedStatus(t *testing.T, status int) bool {
	t.Helper()
	switch status {
	case http.StatusOK:
		return true
	case http.StatusTooManyRequests:
		return false
	}
	t.Fatalf("status %d, want 200 or 429", status)
	return false
}
