package gateway_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/gateway"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/snapshot"
)

// withOrdersInFlight adds a concurrency tier of 1 on "POST /orders" to the
// fixture's plan and waits for the snapshot to enforce it.
func withOrdersInFlight(t *testing.T, f *fixture) {
	t.Helper()
	p, err := f.plans.AddLimit(context.Background(), actor, f.plan.ID, f.plan.Version,
		plans.LimitInput{Name: "orders", Route: "POST /orders", Algorithm: "concurrency", Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	f.plan = p
	f.waitFor(t, func(s *snapshot.Snapshot) bool {
		c, ok := s.KeyCaller(f.key.ID)
		return ok && len(c.Limits) == len(p.Limits)
	})
}

func TestCheckHoldsConcurrencySlotsUntilReleased(t *testing.T) {
	f := newFixture(t, nil)
	withOrdersInFlight(t, f)
	mux := http.NewServeMux()
	mux.Handle(gateway.CheckPath, gateway.NewCheck(f.catalogs(), f.mw, f.logger))
	mux.Handle(gateway.ReleasePath, gateway.NewRelease(f.mw, f.logger))
	ask := func() *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", gateway.CheckPath, nil)
		r.RemoteAddr = "127.0.0.1:5000"
		r.Header.Set("X-Forwarded-Method", "POST")
		r.Header.Set("X-Forwarded-Uri", "/orders")
		r.Header.Set("X-Forwarded-Host", "shop.example.com")
		r.Header.Set("X-API-Key", f.secret)
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		return w
	}
	release := func(token string) int {
		r := httptest.NewRequest("POST", "/v1/release", nil)
		if token != "" {
			r.Header.Set(gateway.HeaderLease, token)
		}
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		return w.Code
	}

	first := ask()
	token := first.Header().Get(gateway.HeaderLease)
	if first.Code != http.StatusOK || token == "" || first.Header().Get(gateway.HeaderLeaseExpires) == "" {
		t.Fatalf("first check: %d, lease %q, expires %q", first.Code, token, first.Header().Get(gateway.HeaderLeaseExpires))
	}
	if got, want := first.Header().Get("RateLimit-Policy"), `"shop-orders";q=1;qu="concurrent-requests"`; got != want {
		t.Errorf("RateLimit-Policy %q, want %q", got, want)
	}
	// The check returned, but the request it admitted is still in flight.
	// Refused while the slot is held: Retry-After 1, not the lease's
	// minute, since the slot frees whenever the request ends or is
	// released (docs/limits.md says why).
	if w := ask(); w.Code != http.StatusTooManyRequests || w.Header().Get(gateway.HeaderLease) != "" {
		t.Fatalf("second check while the first holds the slot: %d, lease %q", w.Code, w.Header().Get(gateway.HeaderLease))
	} else if ra := w.Header().Get("Retry-After"); ra != "1" || !strings.Contains(w.Body.String(), `"retry_after":1,`) {
		t.Errorf("second check while the first holds the slot: Retry-After %q, body %s; want 1 in both", ra, w.Body)
	}
	if code := release(token); code != http.StatusNoContent {
		t.Fatalf("release: %d, want 204", code)
	}
	if code := release(token); code != http.StatusNoContent {
		t.Fatalf("release again: %d, want 204 (nothing left to release)", code)
	}
	if w := ask(); w.Code != http.StatusOK {
		t.Fatalf("check after the release: %d, want 200", w.Code)
	}
	for _, tc := range []struct{ name, token string }{{"NoToken", ""}, {"Garbage", "not base64!"}, {"OtherStore", "cmZha2U"}} {
		t.Run(tc.name, func(t *testing.T) {
			if code := release(tc.token); code != http.StatusBadRequest {
				t.Errorf("release with %q: %d, want 400", tc.token, code)
			}
		})
	}
}

func TestProxyReleasesTheSlotWhenTheUpstreamAnswered(t *testing.T) {
	f := newFixture(t, nil)
	withOrdersInFlight(t, f)
	arrived, finish := make(chan struct{}, 4), make(chan struct{})
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-finish
		_, _ = io.WriteString(w, "ordered")
	}))
	t.Cleanup(api.Close)
	f.setUpstream(t, api.URL)
	srv := f.proxyServer(t)
	order := func() *http.Response {
		req, _ := http.NewRequest("POST", srv.URL+gateway.ProxyPrefix+"shop/orders", strings.NewReader("{}"))
		req.Header.Set("X-API-Key", f.secret)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return nil
		}
		return res
	}
	done := make(chan *http.Response, 1)
	go func() { done <- order() }()
	<-arrived
	if res := order(); res == nil || res.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("a second order while the first is upstream: %v, want 429", res)
	} else {
		res.Body.Close()
	}
	close(finish)
	res := <-done
	if res == nil {
		t.FailNow()
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || string(b) != "ordered" {
		t.Fatalf("first order: %d %q", res.StatusCode, b)
	}
	res = order()
	if res == nil {
		t.FailNow()
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("an order after the first was answered: %d, want 200", res.StatusCode)
	}
}
