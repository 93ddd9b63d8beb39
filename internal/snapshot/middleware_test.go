package snapshot_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/enforce/httplimit"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/snapshot"
)

// TestEnforcedThroughMiddleware wires a Holder into the enforcement
// middleware as cmd/portal does, and checks what API callers get: the
// anonymous plan without a key, the key's plan with one, and 401 (never the
// anonymous plan) for an unknown, revoked or expired key.
func TestEnforcedThroughMiddleware(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	clk := &clock{at: time.Now()}
	h := f.holder(t, snapshot.Options{Now: clk.Now})
	run(t, h)
	store := memstore.New(memstore.Options{})
	mw := httplimit.NewMiddleware(store, h, httplimit.Options{})
	mux := http.NewServeMux()
	mux.Handle("GET /api/search", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"ok":true}`))
	})))

	exp := time.Now().Add(time.Hour)
	k, secret := f.key(t, apikeys.NewKey{})
	_, expiring := f.key(t, apikeys.NewKey{ExpiresAt: &exp})
	eventually(t, h, 5*time.Second, func() bool { _, err := h.ResolveKey(expiring); return err == nil })

	call := func(key string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "/api/search?q=x", nil)
		r.RemoteAddr = "198.51.100.9:1234"
		if key != "" {
			r.Header.Set("Authorization", "Bearer "+key)
		}
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		return w
	}
	type want struct {
		status int
		limit  string // X-RateLimit-Limit: the most restrictive layer
		policy string // a policy RateLimit-Policy must name
		errTag string // JSON "error" of a refusal
	}
	check := func(t *testing.T, key string, w want) {
		t.Helper()
		res := call(key)
		if res.Code != w.status {
			t.Fatalf("status %d, want %d (body %s)", res.Code, w.status, res.Body)
		}
		if got := res.Header().Get("X-RateLimit-Limit"); got != w.limit {
			t.Fatalf("X-RateLimit-Limit = %q, want %q", got, w.limit)
		}
		policy := res.Header().Get("RateLimit-Policy")
		if (w.policy != "" && !strings.Contains(policy, `"`+w.policy+`"`)) || (w.policy == "" && policy != "") {
			t.Fatalf("RateLimit-Policy = %q, want it to name %q", policy, w.policy)
		}
		if w.errTag != "" {
			var body struct {
				Error string `json:"error"`
			}
			if err := json.Unmarshal(res.Body.Bytes(), &body); err != nil || body.Error != w.errTag {
				t.Fatalf("body %s: want JSON error %q", res.Body, w.errTag)
			}
		}
	}

	t.Run("AnonymousPlanWithoutKey", func(t *testing.T) { check(t, "", want{200, "10", "anon-global", ""}) })
	t.Run("KeysPlanWithKey", func(t *testing.T) { check(t, secret, want{200, "10", "free-search", ""}) })
	t.Run("UnknownKeyIs401", func(t *testing.T) { check(t, mustGenerate(t), want{401, "", "", "invalid_api_key"}) })
	t.Run("MalformedKeyIs401", func(t *testing.T) { check(t, "sk_live_oops", want{401, "", "", "invalid_api_key"}) })
	t.Run("ExpiredKeyIs401", func(t *testing.T) {
		clk.Set(exp.Add(time.Second))
		defer clk.Set(time.Now())
		check(t, expiring, want{401, "", "", "invalid_api_key"})
	})
	t.Run("PlanEditEnforced", func(t *testing.T) {
		p, err := f.plans.Get(ctx, f.free.ID)
		if err != nil {
			t.Fatal(err)
		}
		in := p.Input()
		in.Limits[1].Limit = 3 // the search tier
		if _, err := f.plans.Update(ctx, actor, p.ID, p.Version, in); err != nil {
			t.Fatal(err)
		}
		eventually(t, h, 5*time.Second, func() bool { c, _ := h.ResolveKey(secret); return c.Limits[1].Limit == 3 })
		check(t, secret, want{200, "3", "free-search", ""})
	})
	t.Run("RevokedKeyIs401", func(t *testing.T) {
		if err := f.keys.Revoke(ctx, actor, k.ID); err != nil {
			t.Fatal(err)
		}
		eventually(t, h, 5*time.Second, func() bool { _, err := h.ResolveKey(secret); return err != nil })
		check(t, secret, want{401, "", "", "invalid_api_key"})
	})
}
