package adminapi

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/httplimit"
	"github.com/sluicehq/sluice/internal/snapshot"
)

// protectedAPI is a small API behind the real enforcement middleware,
// resolving keys through a snapshot Holder listening to e's database and
// deciding with e's store, so the admin API's usage endpoint sees its
// counters.
type protectedAPI struct {
	srv    *httptest.Server
	holder *snapshot.Holder
	// offset moves the holder's clock forward, to end a grace period
	// without sleeping through it.
	offset atomic.Int64
}

func newProtectedAPI(t *testing.T, e *env) *protectedAPI {
	t.Helper()
	p := &protectedAPI{}
	p.holder = snapshot.NewHolder(e.pool, slog.New(slog.DiscardHandler), snapshot.Options{
		Now: func() time.Time { return time.Now().Add(time.Duration(p.offset.Load())) },
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := p.holder.Run(ctx); err != nil {
			t.Errorf("holder: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-p.holder.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("snapshot not loaded within 10 s")
	}
	mw := httplimit.NewMiddleware(e.store, p.holder, httplimit.Options{})
	mux := http.NewServeMux()
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"results":[]}`))
	})
	for _, route := range testRoutes {
		mux.Handle(route, mw.Wrap(ok))
	}
	p.srv = httptest.NewServer(mux)
	t.Cleanup(p.srv.Close)
	return p
}

// waitFor waits until cond holds for the current snapshot, re-checking on
// every snapshot installed, so a test waits exactly as long as propagation
// takes (bounded by 5 s) instead of sleeping.
func (p *protectedAPI) waitFor(t *testing.T, what string, cond func(*snapshot.Snapshot) bool) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := time.After(5 * time.Second)
	for {
		changed := p.holder.Changed()
		if cond(p.holder.Current()) {
			return time.Since(start)
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("snapshot never showed %s within 5 s", what)
		}
	}
}

// call sends GET /api/search with the key and returns the status and body.
func (p *protectedAPI) call(t *testing.T, secret string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", p.srv.URL+"/api/search?q=x", nil)
	if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	resp, err := p.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return resp.StatusCode, b.String()
}

func TestKeyLifeThroughTheAPI(t *testing.T) {
	e := newEnv(t)
	_, token := e.operator("op@example.com")
	api := newProtectedAPI(t, e)

	res := e.do("POST", Prefix+"/plans", token, validPlan())
	if res.status != http.StatusCreated {
		t.Fatalf("create plan: %d %s", res.status, res.body)
	}
	var gold planView
	res.decode(t, &gold)
	dev := e.user("dev@example.com", "developer", &gold.ID)

	// Create: the secret is in this response and nowhere else.
	res = e.do("POST", Prefix+"/keys", token, map[string]any{"user_id": dev.ID, "name": "laptop"})
	if res.status != http.StatusCreated {
		t.Fatalf("create key: %d %s", res.status, res.body)
	}
	var created keyWithSecret
	res.decode(t, &created)
	secret, key := created.Secret, created.Key
	if apikeys.Check(secret) != nil || key.Prefix != apikeys.PrefixOf(secret) || key.UserID != dev.ID ||
		key.OwnerEmail != "dev@example.com" || key.PlanSlug != "gold" || key.State != "active" || key.Name != "laptop" {
		t.Fatalf("created = %+v (secret well-formed: %v)", key, apikeys.Check(secret) == nil)
	}
	if loc := res.header.Get("Location"); loc != Prefix+"/keys/"+itoa(key.ID) {
		t.Errorf("Location = %q", loc)
	}
	keyPath := Prefix + "/keys/" + itoa(key.ID)

	t.Run("the secret is not retrievable later", func(t *testing.T) {
		for _, path := range []string{keyPath, Prefix + "/keys", Prefix + "/keys?q=" + key.Prefix,
			Prefix + "/keys?q=dev@example", Prefix + "/audit?object_type=key"} {
			res := e.do("GET", path, token, nil)
			if res.status != http.StatusOK {
				t.Fatalf("GET %s: %d", path, res.status)
			}
			if strings.Contains(string(res.body), secret) || strings.Contains(string(res.body), `"secret"`) {
				t.Errorf("GET %s reveals the secret", path)
			}
		}
		var found keyList
		e.do("GET", Prefix+"/keys?q="+key.Prefix, token, nil).decode(t, &found)
		if found.Total != 1 || len(found.Items) != 1 || found.Items[0].ID != key.ID {
			t.Errorf("search by prefix = %+v", found)
		}
		e.do("GET", Prefix+"/keys?q=dev@example", token, nil).decode(t, &found)
		if found.Total != 1 || found.Items[0].ID != key.ID {
			t.Errorf("search by owner = %+v", found)
		}
		e.do("GET", Prefix+"/keys?user_id="+itoa(dev.ID+1000), token, nil).decode(t, &found)
		if found.Total != 0 || len(found.Items) != 0 {
			t.Errorf("search by another owner = %+v", found)
		}
		if n := e.count(`SELECT count(*) FROM api_keys k JOIN api_key_secrets s ON s.key_id = k.id
			WHERE position($1 in k.name || s.prefix || k.overrides::text) > 0`, secret); n != 0 {
			t.Error("the secret is stored in clear")
		}
		if strings.Contains(e.logs.String(), secret) {
			t.Error("the secret reached the log")
		}
	})

	t.Run("a developer key is refused by the admin API", func(t *testing.T) {
		res := e.do("GET", Prefix+"/plans", secret, nil)
		if res.status != http.StatusUnauthorized || !strings.Contains(res.problem(t).Detail, "developer API key") {
			t.Errorf("admin API with a developer key: %d %s", res.status, res.body)
		}
	})

	api.waitFor(t, "the new key", func(s *snapshot.Snapshot) bool { _, ok := s.KeyCaller(key.ID); return ok })

	t.Run("the key calls the API and its usage shows", func(t *testing.T) {
		if status, body := api.call(t, secret); status != http.StatusOK {
			t.Fatalf("call: %d %s", status, body)
		}
		var u keyUsage
		res := e.do("GET", keyPath+"/usage", token, nil)
		if res.status != http.StatusOK {
			t.Fatalf("usage: %d %s", res.status, res.body)
		}
		res.decode(t, &u)
		if u.KeyID != key.ID || u.Subject != "dev:"+itoa(key.UserID) || u.Key != "key:"+itoa(key.ID) || u.Plan != "gold" || u.State != "active" || len(u.Routes) != len(testRoutes) {
			t.Fatalf("usage = %+v", u)
		}
		byRoute := map[string]routeUsage{}
		for _, r := range u.Routes {
			byRoute[r.Route] = r
		}
		search := byRoute["GET /api/search"]
		if len(search.Limits) != 2 || !search.Allowed {
			t.Fatalf("search usage = %+v, want global and search limits", search)
		}
		for _, l := range search.Limits {
			switch l.Policy {
			case "gold-global":
				if l.Remaining != 99 || l.Limit != 100 || l.WindowSeconds != 60 || l.Algorithm != "fixed_window" || !l.Allowed {
					t.Errorf("global after one call = %+v, want 99 of 100 left", l)
				}
			case "gold-search":
				if l.Remaining != 19 || l.Route != "GET /api/search" || l.Algorithm != "token_bucket" {
					t.Errorf("search after one call = %+v, want 19 of burst 20 left", l)
				}
			default:
				t.Errorf("unexpected limit %q", l.Policy)
			}
		}
		items := byRoute["GET /api/items/{id}"]
		if len(items.Limits) != 1 || items.Limits[0].Policy != "gold-global" || items.Limits[0].Remaining != 99 {
			t.Errorf("items usage = %+v, want only the global limit, 99 left", items)
		}
		// Peek consumed nothing: a second read shows the same.
		var again keyUsage
		e.do("GET", keyPath+"/usage", token, nil).decode(t, &again)
		if again.Routes[0].Limits[0].Remaining != u.Routes[0].Limits[0].Remaining {
			t.Errorf("reading usage consumed quota: %d then %d", u.Routes[0].Limits[0].Remaining, again.Routes[0].Limits[0].Remaining)
		}
	})

	var rotated keyWithSecret
	t.Run("rotate: both secrets work during the grace period, only the new one after", func(t *testing.T) {
		res := e.do("POST", keyPath+"/rotate", token, map[string]any{"grace_seconds": 60})
		if res.status != http.StatusOK {
			t.Fatalf("rotate: %d %s", res.status, res.body)
		}
		res.decode(t, &rotated)
		if rotated.Secret == secret || apikeys.Check(rotated.Secret) != nil || rotated.Key.ID != key.ID ||
			rotated.Key.Prefix != apikeys.PrefixOf(rotated.Secret) || rotated.Key.Version <= key.Version {
			t.Fatalf("rotated = %+v", rotated.Key)
		}
		api.waitFor(t, "the rotated secret", func(*snapshot.Snapshot) bool {
			_, err := api.holder.ResolveKey(rotated.Secret)
			return err == nil
		})
		if status, body := api.call(t, secret); status != http.StatusOK {
			t.Errorf("old secret in the grace period: %d %s", status, body)
		}
		if status, body := api.call(t, rotated.Secret); status != http.StatusOK {
			t.Errorf("new secret: %d %s", status, body)
		}
		api.offset.Store(int64(61 * time.Second))
		if status, _ := api.call(t, secret); status != http.StatusUnauthorized {
			t.Errorf("old secret after the grace period: %d, want 401", status)
		}
		if status, body := api.call(t, rotated.Secret); status != http.StatusOK {
			t.Errorf("new secret after the grace period: %d %s", status, body)
		}
	})

	t.Run("revoke: 401 on the next call once the snapshot has it", func(t *testing.T) {
		res := e.do("POST", keyPath+"/revoke", token, nil)
		if res.status != http.StatusOK {
			t.Fatalf("revoke: %d %s", res.status, res.body)
		}
		var revoked keyView
		res.decode(t, &revoked)
		if revoked.State != "revoked" || revoked.RevokedAt == nil {
			t.Errorf("revoked = %+v", revoked)
		}
		took := api.waitFor(t, "the revocation", func(s *snapshot.Snapshot) bool { _, ok := s.KeyCaller(key.ID); return !ok })
		t.Logf("revocation reached the snapshot in %v", took)
		status, body := api.call(t, rotated.Secret)
		if status != http.StatusUnauthorized {
			t.Fatalf("revoked key: %d %s, want 401", status, body)
		}
		var rejection map[string]any
		if err := json.Unmarshal([]byte(body), &rejection); err != nil {
			t.Errorf("401 body is not JSON: %q", body)
		}
		if res := e.do("POST", keyPath+"/revoke", token, nil); res.status != http.StatusConflict {
			t.Errorf("second revoke: %d, want 409", res.status)
		}
		if res := e.do("POST", keyPath+"/rotate", token, map[string]any{"grace_seconds": 0}); res.status != http.StatusConflict {
			t.Errorf("rotate a revoked key: %d, want 409", res.status)
		}
		var list keyList
		e.do("GET", Prefix+"/keys?state=revoked", token, nil).decode(t, &list)
		if list.Total != 1 || list.Items[0].ID != key.ID {
			t.Errorf("revoked keys = %+v", list)
		}
		e.do("GET", Prefix+"/keys?state=active", token, nil).decode(t, &list)
		if list.Total != 0 {
			t.Errorf("active keys = %+v, want none", list)
		}
	})

	t.Run("every change is audited with the token as actor", func(t *testing.T) {
		var log auditList
		e.do("GET", Prefix+"/audit?object_type=key&object_id="+itoa(key.ID), token, nil).decode(t, &log)
		var actions []string
		for _, en := range log.Items {
			actions = append(actions, en.Action)
			if !strings.HasPrefix(en.Actor, "token:") {
				t.Errorf("%s by %q, want token:<id>", en.Action, en.Actor)
			}
		}
		if got, want := strings.Join(actions, ","), "key.revoke,key.rotate,key.create"; got != want {
			t.Errorf("key audit = %s, want %s", got, want)
		}
	})
}

func TestKeyEdits(t *testing.T) {
	e := newEnv(t)
	_, token := e.operator("op@example.com")
	var gold, silver planView
	e.do("POST", Prefix+"/plans", token, validPlan()).decode(t, &gold)
	e.do("POST", Prefix+"/plans", token, with(func(p map[string]any) { p["slug"], p["name"] = "silver", "Silver" })).decode(t, &silver)
	dev := e.user("dev@example.com", "developer", &gold.ID)
	var created keyWithSecret
	e.do("POST", Prefix+"/keys", token, map[string]any{"user_id": dev.ID, "name": "ci"}).decode(t, &created)
	keyPath := Prefix + "/keys/" + itoa(created.Key.ID)

	tests := []struct {
		name       string
		method     string
		path       string
		body       any
		wantStatus int
		wantFields []string
	}{
		{"create without owner or name", "POST", Prefix + "/keys", map[string]any{}, 400, []string{"user_id", "name"}},
		{"create with an expiry in the past", "POST", Prefix + "/keys", map[string]any{"user_id": dev.ID, "name": "x", "expires_at": "2001-01-01T00:00:00Z"}, 400, []string{"expires_at"}},
		{"create with an expiry at the end of time", "POST", Prefix + "/keys", map[string]any{"user_id": dev.ID, "name": "x", "expires_at": "9999-12-31T23:59:59Z"}, 400, []string{"expires_at"}},
		{"create with an expiry past year 9999 in UTC", "POST", Prefix + "/keys", map[string]any{"user_id": dev.ID, "name": "x", "expires_at": "9999-12-31T23:59:59-05:00"}, 400, []string{"expires_at"}},
		{"create with an expiry past ten years", "POST", Prefix + "/keys", map[string]any{"user_id": dev.ID, "name": "x", "expires_at": "2999-01-01T00:00:00Z"}, 400, []string{"expires_at"}},
		{"create with a bad override", "POST", Prefix + "/keys", map[string]any{"user_id": dev.ID, "name": "x",
			"overrides": []any{map[string]any{"name": "global", "algorithm": "fixed_window", "limit": 0, "window_seconds": 60}}}, 400, []string{"overrides[0].limit"}},
		{"rotate with a grace over a day", "POST", keyPath + "/rotate", map[string]any{"grace_seconds": 86401}, 400, []string{"grace_seconds"}},
		{"rotate with a negative grace", "POST", keyPath + "/rotate", map[string]any{"grace_seconds": -1}, 400, []string{"grace_seconds"}},
		{"plan without plan_id", "PUT", keyPath + "/plan", map[string]any{}, 400, []string{"plan_id"}},
		{"plan with a string id", "PUT", keyPath + "/plan", map[string]any{"plan_id": "gold"}, 400, []string{"plan_id"}},
		{"overrides without version", "PUT", keyPath + "/overrides", map[string]any{"overrides": []any{}}, 400, []string{"version"}},
		{"overrides at a stale version", "PUT", keyPath + "/overrides", map[string]any{"version": created.Key.Version + 5, "overrides": []any{}}, 409, nil},
		{"unknown key", "GET", Prefix + "/keys/999999", nil, 404, nil},
		{"bad list state", "GET", Prefix + "/keys?state=lost&limit=0", nil, 400, []string{"state", "limit"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			keysBefore := e.count(`SELECT count(*) FROM api_keys`)
			auditBefore := e.count(`SELECT count(*) FROM audit_log`)
			res := e.do(tt.method, tt.path, token, tt.body)
			if res.status != tt.wantStatus {
				t.Fatalf("status = %d, want %d (%s)", res.status, tt.wantStatus, res.body)
			}
			p := res.problem(t)
			var fields []string
			for _, f := range p.Errors {
				fields = append(fields, f.Field)
			}
			if strings.Join(fields, ",") != strings.Join(tt.wantFields, ",") {
				t.Errorf("fields = %q, want %q", fields, tt.wantFields)
			}
			if n := e.count(`SELECT count(*) FROM api_keys`); n != keysBefore {
				t.Errorf("keys %d -> %d", keysBefore, n)
			}
			if n := e.count(`SELECT count(*) FROM audit_log`); n != auditBefore {
				t.Errorf("audit entries %d -> %d", auditBefore, n)
			}
		})
	}

	t.Run("set a plan, then return to the owner's", func(t *testing.T) {
		var k keyView
		res := e.do("PUT", keyPath+"/plan", token, map[string]any{"plan_id": silver.ID})
		if res.status != http.StatusOK {
			t.Fatalf("set plan: %d %s", res.status, res.body)
		}
		res.decode(t, &k)
		if k.PlanID == nil || *k.PlanID != silver.ID || k.PlanSlug != "silver" {
			t.Errorf("after set: plan %v %q", k.PlanID, k.PlanSlug)
		}
		res = e.do("DELETE", Prefix+"/plans/"+itoa(silver.ID), token, nil)
		if res.status != http.StatusConflict || res.problem(t).Type != typeInUse {
			t.Errorf("delete a plan a key uses: %d %s, want 409 in-use", res.status, res.body)
		}
		res = e.do("PUT", keyPath+"/plan", token, map[string]any{"plan_id": nil})
		if res.status != http.StatusOK {
			t.Fatalf("clear plan: %d %s", res.status, res.body)
		}
		res.decode(t, &k)
		if k.PlanID != nil || k.PlanSlug != "gold" {
			t.Errorf("after clear: plan %v %q, want the owner's gold", k.PlanID, k.PlanSlug)
		}
		if res := e.do("DELETE", Prefix+"/plans/"+itoa(silver.ID), token, nil); res.status != http.StatusNoContent {
			t.Errorf("delete silver once no key uses it: %d %s", res.status, res.body)
		}
	})

	t.Run("overrides replace the plan's limit in usage", func(t *testing.T) {
		var k keyView
		e.do("GET", keyPath, token, nil).decode(t, &k)
		res := e.do("PUT", keyPath+"/overrides", token, map[string]any{"version": k.Version, "overrides": []any{
			map[string]any{"name": "global", "algorithm": "fixed_window", "limit": 7, "window_seconds": 60}}})
		if res.status != http.StatusOK {
			t.Fatalf("set overrides: %d %s", res.status, res.body)
		}
		res.decode(t, &k)
		if len(k.Overrides) != 1 || k.Overrides[0].Limit != 7 {
			t.Errorf("overrides = %+v", k.Overrides)
		}
		var u keyUsage
		e.do("GET", keyPath+"/usage", token, nil).decode(t, &u)
		if l := u.Routes[1].Limits; len(l) != 1 || l[0].Policy != "gold-global" || l[0].Limit != 7 || l[0].Remaining != 7 {
			t.Errorf("usage of %s = %+v, want the overridden global limit of 7", u.Routes[1].Route, l)
		}
		if res := e.do("PUT", keyPath+"/overrides", token, map[string]any{"version": k.Version - 1, "overrides": []any{}}); res.status != http.StatusConflict {
			t.Errorf("stale overrides: %d, want 409", res.status)
		} else if p := res.problem(t); p.Type != typeStaleVersion {
			t.Errorf("type = %q", p.Type)
		}
	})

	t.Run("usage answers 503 when the counters are unreachable", func(t *testing.T) {
		srv := httptest.NewServer(New(Deps{Plans: e.plans, Keys: e.keys, Tokens: e.tokens,
			Store: downStore{}, Pool: e.pool, Logger: slog.New(slog.DiscardHandler)}))
		defer srv.Close()
		req, _ := http.NewRequest("GET", srv.URL+keyPath+"/usage", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("status = %d, want 503", resp.StatusCode)
		}
	})
}

// downStore is a rate-limit store whose backend cannot be reached.
type downStore struct{}

func (downStore) Allow(context.Context, enforce.Request) (enforce.Decision, error) {
	return enforce.Decision{}, errors.Join(enforce.ErrStoreUnavailable, errors.New("dial tcp: refused"))
}

func (downStore) Peek(context.Context, enforce.Request) (enforce.Decision, error) {
	return enforce.Decision{}, errors.Join(enforce.ErrStoreUnavailable, errors.New("dial tcp: refused"))
}

func TestCreateKeyOverTheCap(t *testing.T) {
	e := newEnv(t)
	e.keys.LimitKeysPerUser(1)
	_, token := e.operator("op@example.com")
	dev := e.user("dev@example.com", "developer", nil)
	if res := e.do("POST", Prefix+"/keys", token, map[string]any{"user_id": dev.ID, "name": "only"}); res.status != http.StatusCreated {
		t.Fatalf("first key: %d %s", res.status, res.body)
	}
	res := e.do("POST", Prefix+"/keys", token, map[string]any{"user_id": dev.ID, "name": "second"})
	if res.status != http.StatusConflict || res.header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("second key: %d %s %s, want a 409 problem", res.status, res.header.Get("Content-Type"), res.body)
	}
	var p Problem
	res.decode(t, &p)
	if p.Title != "Too many keys" || len(p.Errors) != 1 || p.Errors[0].Field != "user_id" || !strings.Contains(p.Detail, "PORTAL_KEYS_PER_DEVELOPER") {
		t.Fatalf("problem = %+v, want the key cap named on user_id", p)
	}
}
