package policy_test

import (
	"encoding/json"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/policy"
)

// TestKeyScopeTravelsToGuard: a key's scope crosses the policy feed as
// JSON and comes out as the Caller's Scope in guard's resolver, so guard
// refuses what the portal refuses; a key without one stays unrestricted.
func TestKeyScopeTravelsToGuard(t *testing.T) {
	scoped, _ := apikeys.Generate()
	free, _ := apikeys.Generate()
	doc := policy.Document{Version: 1, Plans: map[string][]policy.Limit{"basic": {}},
		Keys: []policy.Key{
			{Hash: hashOf(scoped), KeyID: 1, UserID: 9, Plan: "basic", AllowedRoutes: []string{"GET /items/{id}"},
				AllowedCIDRs: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}, ReadOnly: true},
			{Hash: hashOf(free), KeyID: 2, UserID: 9, Plan: "basic"},
		}}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var wire policy.Document
	if err := json.Unmarshal(b, &wire); err != nil {
		t.Fatal(err)
	}
	r := policy.NewResolver(time.Now)
	if err := r.Install(wire); err != nil {
		t.Fatal(err)
	}
	c, err := r.ResolveKey(scoped)
	if err != nil || c.Scope == nil || !slices.Equal(c.Scope.Routes, []string{"GET /items/{id}"}) || len(c.Scope.CIDRs) != 1 || !c.Scope.ReadOnly {
		t.Fatalf("scoped key resolves as %+v, %v", c.Scope, err)
	}
	if _, ok := c.Scope.Permits("GET", "GET /items/{id}", netip.MustParseAddr("203.0.113.1")); ok {
		t.Error("an address outside the key's range is permitted")
	}
	if c, err := r.ResolveKey(free); err != nil || c.Scope != nil {
		t.Errorf("unscoped key resolves with scope %+v, %v", c.Scope, err)
	}
}
