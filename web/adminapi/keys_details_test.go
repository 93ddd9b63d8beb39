package adminapi

import (
	"net/http"
	"testing"
	"time"
)

// The review's admin API findings: a PUT without overrides wiped them,
// operators got keys, and a malformed expires_at named no field.
func TestKeyRequestDetails(t *testing.T) {
	e := newEnv(t)
	opID, token := e.operator("ops@example.com")
	dev := e.user("dev@example.com", "developer", nil)
	override := map[string]any{"name": "global", "algorithm": "fixed_window", "limit": 5, "window_seconds": 60}
	res := e.do("POST", Prefix+"/keys", token, map[string]any{"user_id": dev.ID, "name": "ci", "overrides": []any{override}})
	if res.status != http.StatusCreated {
		t.Fatalf("create key: %d %s", res.status, res.body)
	}
	var created keyWithSecret
	res.decode(t, &created)
	keyPath := Prefix + "/keys/" + itoa(created.Key.ID)

	t.Run("OverridesRequired", func(t *testing.T) {
		for _, body := range []map[string]any{
			{"version": created.Key.Version},
			{"version": created.Key.Version, "overrides": nil},
		} {
			res := e.do("PUT", keyPath+"/overrides", token, body)
			p := res.problem(t)
			if res.status != http.StatusBadRequest || len(p.Errors) != 1 || p.Errors[0].Field != "overrides" {
				t.Errorf("%v: status %d errors %+v, want 400 naming overrides", body, res.status, p.Errors)
			}
		}
		if n := e.count(`SELECT jsonb_array_length(overrides) FROM api_keys WHERE id = $1`, created.Key.ID); n != 1 {
			t.Errorf("%d overrides left, want the 1 it had", n)
		}
		res := e.do("PUT", keyPath+"/overrides", token, map[string]any{"version": created.Key.Version, "overrides": []any{}})
		if res.status != http.StatusOK || e.count(`SELECT jsonb_array_length(overrides) FROM api_keys WHERE id = $1`, created.Key.ID) != 0 {
			t.Errorf("explicit []: status %d, want 200 and no overrides", res.status)
		}
	})
	t.Run("NoKeysForOperators", func(t *testing.T) {
		res := e.do("POST", Prefix+"/keys", token, map[string]any{"user_id": opID, "name": "mine"})
		p := res.problem(t)
		if res.status != http.StatusBadRequest || len(p.Errors) != 1 || p.Errors[0].Field != "user_id" ||
			p.Errors[0].Message != "is an operator account: API keys belong to developers" {
			t.Errorf("status %d errors %+v", res.status, p.Errors)
		}
		if n := e.count(`SELECT count(*) FROM api_keys WHERE user_id = $1`, opID); n != 0 {
			t.Errorf("%d keys created for the operator", n)
		}
	})
	t.Run("MalformedExpiresAtNamed", func(t *testing.T) {
		for _, v := range []any{"tomorrow", "2027-01-31", "2027-01-31 12:00:00"} {
			res := e.do("POST", Prefix+"/keys", token, map[string]any{"user_id": dev.ID, "name": "x", "expires_at": v})
			p := res.problem(t)
			if res.status != http.StatusBadRequest || len(p.Errors) != 1 || p.Errors[0].Field != "expires_at" {
				t.Errorf("expires_at %v: status %d errors %+v, want 400 naming expires_at", v, res.status, p.Errors)
			}
		}
		res := e.do("POST", Prefix+"/keys", token, map[string]any{"user_id": dev.ID, "name": "x", "expires_at": 12})
		if p := res.problem(t); res.status != http.StatusBadRequest || len(p.Errors) != 1 || p.Errors[0].Field != "expires_at" {
			t.Errorf("numeric expires_at: status %d errors %+v", res.status, p.Errors)
		}
		// Within apikeys.MaxExpiryYears.
		res = e.do("POST", Prefix+"/keys", token, map[string]any{"user_id": dev.ID, "name": "x", "expires_at": time.Now().AddDate(9, 0, 0).UTC().Format(time.RFC3339)})
		if res.status != http.StatusCreated {
			t.Errorf("valid expires_at: status %d %s", res.status, res.body)
		}
	})
}
