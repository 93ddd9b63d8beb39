package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/httplimit"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
)

// TestKeyScopeRefusesBeforeAnyLimit: a key limited to routes, address
// ranges or reading (issue 37, item 4) is answered 403 naming the scope
// outside it, through the HTTP middleware and through Check (Envoy's way
// in), and a refused call consumes none of the key's budget: the admitted
// calls that follow are counted from a full limit.
func TestKeyScopeRefusesBeforeAnyLimit(t *testing.T) {
	const limit = 3
	limits := []enforce.Limit{{Name: "fw", Algorithm: enforce.FixedWindow, Limit: limit, Window: time.Hour}}
	scope := &enforce.Scope{Routes: []string{"GET /api/items/{id}", "/api/reports"}, CIDRs: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}, ReadOnly: true}
	res := &mwResolver{Keys: map[string]enforce.Caller{"sk_scoped": {Subject: "dev:1", Key: "key:1", Plan: "pro", Limits: limits, Scope: scope}}}
	mw := httplimit.NewMiddleware(memstore.New(memstore.Options{}), res, httplimit.Options{
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	mux := http.NewServeMux()
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	for _, p := range []string{"GET /api/items/{id}", "GET /api/search", "POST /api/reports", "GET /api/reports"} {
		mux.Handle(p, mw.Wrap(ok))
	}
	do := func(method, path, from string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, path, nil)
		r.RemoteAddr = "127.0.0.1:4000"
		r.Header.Set("X-Forwarded-For", from)
		r.Header.Set("Authorization", "Bearer sk_scoped")
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		return w
	}
	for _, tc := range []struct {
		name, method, path, from, reason string
	}{
		{"RouteOutside", "GET", "/api/search", "198.51.100.7", "may call only its allowed routes"},
		{"AddressOutside", "GET", "/api/items/1", "203.0.113.5", "allowed address ranges"},
		{"Write", "POST", "/api/reports", "198.51.100.7", "read-only"},
	} {
		for range 2 * limit {
			w := do(tc.method, tc.path, tc.from)
			if w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), "key_out_of_scope") || !strings.Contains(w.Body.String(), tc.reason) {
				t.Fatalf("%s: %d %s, want 403 naming %q", tc.name, w.Code, w.Body, tc.reason)
			}
		}
	}
	admitted := 0
	for range limit + 2 {
		path := "/api/items/1"
		if admitted%2 == 1 {
			path = "/api/reports" // a method-less scope entry: every method, read-only still GET
		}
		if w := do("GET", path, "198.51.100.7"); w.Code == http.StatusOK {
			admitted++
		}
	}
	if admitted != limit {
		t.Errorf("%d admitted within the scope after %d refusals, want the whole limit of %d", admitted, 6*limit, limit)
	}

	// The Envoy service's way in: the same scope on the same store.
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		cred  httplimit.Credentials
		route string
		want  int
	}{
		{"CheckRouteOutside", httplimit.Credentials{Authorization: "Bearer sk_scoped", Addr: netip.MustParseAddr("198.51.100.7"), Method: "GET"}, "GET /api/search", http.StatusForbidden},
		{"CheckAddressOutside", httplimit.Credentials{Authorization: "Bearer sk_scoped", Addr: netip.MustParseAddr("203.0.113.5"), Method: "GET"}, "GET /api/items/{id}", http.StatusForbidden},
		{"CheckWrite", httplimit.Credentials{Authorization: "Bearer sk_scoped", Addr: netip.MustParseAddr("198.51.100.7"), Method: "POST"}, "/api/reports", http.StatusForbidden},
		{"CheckInsideButSpent", httplimit.Credentials{Authorization: "Bearer sk_scoped", Addr: netip.MustParseAddr("198.51.100.7"), Method: "GET"}, "GET /api/items/{id}", http.StatusTooManyRequests},
	} {
		if v := mw.Check(ctx, tc.cred, tc.route, 1); v.Status != tc.want {
			t.Errorf("%s: status %d, want %d", tc.name, v.Status, tc.want)
		}
	}
}
