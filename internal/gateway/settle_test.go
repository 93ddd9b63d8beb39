package gateway_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/httplimit"
	"github.com/sluicehq/sluice/internal/gateway"
	"github.com/sluicehq/sluice/internal/snapshot"
)

// TestProxySettlesTheCostTheUpstreamReports: a tier whose cost comes from
// the upstream's X-Tokens-Used header and counts successes only, through
// the reverse proxy: each response's figure is what the tier spends, an
// upstream error gives its cost back, and the response says how it is
// counted. Forward auth, which never sees the response, leaves the cost
// as charged.
func TestProxySettlesTheCostTheUpstreamReports(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	p, err := f.plans.Get(ctx, f.plan.ID)
	if err != nil {
		t.Fatal(err)
	}
	in := p.Limits[0].Input()
	in.Limit, in.CountWhen, in.CostHeader = 100, "success", "X-Tokens-Used"
	if _, err := f.plans.UpdateLimit(ctx, actor, p.ID, p.Version, p.Limits[0].ID, in); err != nil {
		t.Fatal(err)
	}
	f.waitFor(t, func(*snapshot.Snapshot) bool {
		c, err := f.holder.ResolveKey(f.secret)
		return err == nil && len(c.Limits) > 0 && c.Limits[0].CostHeader != ""
	})
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Tokens-Used", r.URL.Query().Get("tokens"))
		if r.URL.Query().Get("fail") != "" {
			w.WriteHeader(http.StatusBadGateway)
		}
	}))
	t.Cleanup(api.Close)
	f.setUpstream(t, api.URL)
	srv := httptest.NewServer(gateway.Listener(f.catalogs(), gateway.NewProxy(f.catalogs(), f.mw.WayIn(httplimit.WayInProxy), nil, f.logger)))
	t.Cleanup(srv.Close)
	checkMux := http.NewServeMux()
	checkMux.Handle(gateway.CheckPath, gateway.NewCheck(f.catalogs(), f.mw.WayIn(httplimit.WayInCheck), f.logger))
	check := httptest.NewServer(checkMux)
	t.Cleanup(check.Close)

	used := func() int64 {
		t.Helper()
		c, err := f.holder.ResolveKey(f.secret)
		if err != nil {
			t.Fatal(err)
		}
		req := enforce.Request{Subject: c.Subject, Key: c.Key, Limits: enforce.Applicable(c.Limits, itemsRoute)}
		d, err := f.store.Peek(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return 100 - d.Layers[0].Remaining
	}
	// The settlement follows the response, which the client may hold
	// before the proxy's handler returns; a server serves one
	// connection's requests in turn, so the answer to a second request on
	// the same (only) connection comes after the first one settled.
	one := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}
	t.Cleanup(one.CloseIdleConnections)
	send := func(url string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Set("Authorization", "Bearer "+f.secret)
		res, err := one.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	for _, q := range []string{"tokens=30", "tokens=12", "tokens=40&fail=1", "tokens=0"} {
		res := send(srv.URL + gateway.ProxyPrefix + "shop/items/1?" + q)
		if got := res.Header.Get("Sluice-Count"); got != `"shop-items";when=success;cost-header="x-tokens-used"` {
			t.Errorf("%s: Sluice-Count = %q", q, got)
		}
		statusOf(t, res)
		if got := statusOf(t, send(srv.URL+"/not-a-service")); got != http.StatusNotFound {
			t.Fatalf("the request after %s answered %d", q, got)
		}
	}
	if got := used(); got != 42 {
		t.Errorf("through the proxy: %d used after 30, 12, an error and 0, want 42", got)
	}
	// Forward auth charges the tier's cost and never hears of the
	// response.
	req, _ := http.NewRequest("GET", check.URL+gateway.CheckPath, nil)
	req.Header.Set("X-Forwarded-Method", "GET")
	req.Header.Set("X-Forwarded-Uri", "/items/1")
	req.Header.Set("X-Forwarded-Host", "shop.example.com")
	req.Header.Set("Authorization", "Bearer "+f.secret)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if statusOf(t, res) != http.StatusOK || res.Header.Get("Sluice-Count") != "" {
		t.Errorf("check answered %d with Sluice-Count %q", res.StatusCode, res.Header.Get("Sluice-Count"))
	}
	if got := used(); got != 43 {
		t.Errorf("after a check: %d used, want 43 (the cost of 1, never settled)", got)
	}
}
