package gateway_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/gateway"
	"github.com/sluicehq/sluice/internal/snapshot"
)

// TestCheckSaysWhoCalled: an admitted check carries the caller's key id,
// developer, plan and, for a scoped key, its scope as JSON; an anonymous
// caller has a plan at most; a refusal carries none of them.
func TestCheckSaysWhoCalled(t *testing.T) {
	f := newFixture(t, nil)
	scoped, scopedSecret, err := f.keys.Create(context.Background(), actor, apikeys.NewKey{UserID: f.key.UserID, Name: "scoped",
		Scope: apikeys.ScopeInput{Routes: []string{itemsRoute}, CIDRs: []string{"203.0.113.0/24"}, ReadOnly: true}})
	if err != nil {
		t.Fatal(err)
	}
	f.waitFor(t, func(s *snapshot.Snapshot) bool { _, ok := s.KeyCaller(scoped.ID); return ok })
	check := gateway.NewCheck(f.catalogs(), f.mw, f.logger)
	ask := func(method, uri, key string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", gateway.CheckPath, nil)
		r.RemoteAddr = "127.0.0.1:5000"
		r.Header.Set("X-Forwarded-Method", method)
		r.Header.Set("X-Forwarded-Uri", uri)
		r.Header.Set("X-Forwarded-For", "203.0.113.7")
		if key != "" {
			r.Header.Set("X-API-Key", key)
		}
		// A client's claims, forwarded by the gateway, are not Sluice's
		// answer.
		r.Header.Set(gateway.HeaderKeyID, "999")
		w := httptest.NewRecorder()
		check.ServeHTTP(w, r)
		return w
	}
	for _, tc := range []struct {
		name, method, uri, key string
		status                 int
		want                   map[string]string // "" for absent
	}{
		{"Key", "POST", "/orders", f.secret, http.StatusOK, map[string]string{
			gateway.HeaderKeyID: strconv.FormatInt(f.key.ID, 10), gateway.HeaderDeveloperID: strconv.FormatInt(f.key.UserID, 10),
			gateway.HeaderPlan: "shop", gateway.HeaderKeyScope: ""}},
		{"ScopedKey", "GET", "/items/1", scopedSecret, http.StatusOK, map[string]string{
			gateway.HeaderKeyID: strconv.FormatInt(scoped.ID, 10), gateway.HeaderDeveloperID: strconv.FormatInt(f.key.UserID, 10),
			gateway.HeaderPlan: "shop", gateway.HeaderKeyScope: `{"allowed_routes":["GET /items/{id}"],"allowed_cidrs":["203.0.113.0/24"],"read_only":true}`}},
		{"Anonymous", "POST", "/orders", "", http.StatusOK, map[string]string{
			gateway.HeaderKeyID: "", gateway.HeaderDeveloperID: "", gateway.HeaderPlan: "", gateway.HeaderKeyScope: ""}},
		{"RefusedOutOfScope", "POST", "/orders", scopedSecret, http.StatusForbidden, map[string]string{
			gateway.HeaderKeyID: "", gateway.HeaderDeveloperID: "", gateway.HeaderPlan: "", gateway.HeaderKeyScope: ""}},
		{"RefusedBadKey", "POST", "/orders", "sk_live_unknown", http.StatusUnauthorized, map[string]string{
			gateway.HeaderKeyID: "", gateway.HeaderDeveloperID: "", gateway.HeaderPlan: "", gateway.HeaderKeyScope: ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := ask(tc.method, tc.uri, tc.key)
			if w.Code != tc.status {
				t.Fatalf("status %d, want %d (body %s)", w.Code, tc.status, w.Body)
			}
			for name, want := range tc.want {
				if got := w.Header().Values(name); want == "" && len(got) != 0 || want != "" && (len(got) != 1 || got[0] != want) {
					t.Errorf("%s = %q, want %q", name, got, want)
				}
			}
		})
	}
}
