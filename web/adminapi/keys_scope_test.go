package adminapi

import (
	"net/http"
	"slices"
	"testing"
)

// TestKeyScope: a key's scope (issue 37, item 4) is set at creation,
// validated field by field, replaced only whole, and audited.
func TestKeyScope(t *testing.T) {
	e := newEnv(t)
	_, token := e.operator("ops@example.com")
	dev := e.user("dev@example.com", "developer", nil)

	res := e.do("POST", Prefix+"/keys", token, map[string]any{"user_id": dev.ID, "name": "ci",
		"allowed_routes": []string{"GET /api/search", " /api/items/{id} "}, "allowed_cidrs": []string{"203.0.113.9/24", "2001:db8::1"}, "read_only": true})
	if res.status != http.StatusCreated {
		t.Fatalf("create scoped key: %d %s", res.status, res.body)
	}
	var created keyWithSecret
	res.decode(t, &created)
	k := created.Key
	if !slices.Equal(k.AllowedRoutes, []string{"GET /api/search", "/api/items/{id}"}) || len(k.AllowedCIDRs) != 2 ||
		k.AllowedCIDRs[0].String() != "203.0.113.0/24" || k.AllowedCIDRs[1].String() != "2001:db8::1/128" || !k.ReadOnly {
		t.Errorf("created scope %v %v %v, want the routes trimmed, the ranges masked, read-only", k.AllowedRoutes, k.AllowedCIDRs, k.ReadOnly)
	}

	t.Run("Refused", func(t *testing.T) {
		res := e.do("POST", Prefix+"/keys", token, map[string]any{"user_id": dev.ID, "name": "bad",
			"allowed_routes": []string{"GET /api/nowhere", "DELETE /api/search"}, "allowed_cidrs": []string{"10.0.0.0/33", "example.com"}})
		p := res.problem(t)
		fields := map[string]int{}
		for _, fe := range p.Errors {
			fields[fe.Field]++
		}
		if res.status != http.StatusBadRequest || fields["allowed_routes"] != 2 || fields["allowed_cidrs"] != 2 {
			t.Errorf("status %d errors %+v, want 400 naming two routes and two ranges", res.status, p.Errors)
		}
		if n := e.count(`SELECT count(*) FROM api_keys WHERE name = 'bad'`); n != 0 {
			t.Errorf("%d keys created from a refused scope", n)
		}
	})

	keyPath := Prefix + "/keys/" + itoa(k.ID)
	t.Run("WholeScopeRequired", func(t *testing.T) {
		res := e.do("PUT", keyPath+"/scope", token, map[string]any{"allowed_routes": []string{}})
		p := res.problem(t)
		if res.status != http.StatusBadRequest || len(p.Errors) != 2 {
			t.Errorf("status %d errors %+v, want 400 naming allowed_cidrs and read_only", res.status, p.Errors)
		}
		if n := e.count(`SELECT cardinality(allowed_routes) FROM api_keys WHERE id = $1`, k.ID); n != 2 {
			t.Errorf("%d routes left, want the 2 it had", n)
		}
	})
	t.Run("Narrowed", func(t *testing.T) {
		res := e.do("PUT", keyPath+"/scope", token, map[string]any{"allowed_routes": []string{"GET /api/search"}, "allowed_cidrs": []string{}, "read_only": false})
		if res.status != http.StatusOK {
			t.Fatalf("set scope: %d %s", res.status, res.body)
		}
		var got keyView
		res.decode(t, &got)
		if !slices.Equal(got.AllowedRoutes, []string{"GET /api/search"}) || len(got.AllowedCIDRs) != 0 || got.ReadOnly || got.Version != k.Version+1 {
			t.Errorf("scope after PUT: %+v", got.Key)
		}
		if n := e.count(`SELECT count(*) FROM audit_log WHERE action = 'key.scope'`); n != 1 {
			t.Errorf("%d audit entries for the scope change, want 1", n)
		}
	})
}
