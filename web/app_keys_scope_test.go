package web_test

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/apikeys"
)

// TestMyKeyScope: a developer limits a key when creating it (issue 37,
// item 4); what they typed comes back with the errors when it is refused,
// and the list says what the key may do.
func TestMyKeyScope(t *testing.T) {
	e := newEnv(t)
	e.defaultPlan()
	c := e.signedIn(developerEmail)

	refused := c.post("/app/keys", url.Values{"name": {"narrow"}, "allowed_routes": {"GET /api/nowhere"}, "allowed_cidrs": {"not a range"}, "read_only": {"1"}}, nil)
	if refused.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("status %d, want 422", refused.StatusCode)
	}
	d := refused.doc(t)
	if !strings.Contains(text(d, "error-allowed_routes"), `"GET /api/nowhere" is no route the API serves`) ||
		!strings.Contains(text(d, "error-allowed_cidrs"), `"not a range" is no address range`) {
		t.Errorf("errors %q / %q", text(d, "error-allowed_routes"), text(d, "error-allowed_cidrs"))
	}
	if got := text(d, "key-routes"); got != "GET /api/nowhere" {
		t.Errorf("the routes field holds %q, want what was typed", got)
	}

	created := c.post("/app/keys", url.Values{"name": {"narrow"}, "allowed_routes": {"GET /api/search\r\n/api/items/{id}\r\n"}, "allowed_cidrs": {"198.51.100.0/24"}, "read_only": {"1"}}, nil)
	if created.StatusCode != http.StatusSeeOther {
		t.Fatalf("status %d, want 303 to the secret page", created.StatusCode)
	}
	list := c.get("/app/keys", nil)
	if got := text(list.doc(t), "my-key-scope"); got != "read-only · 2 routes · 1 address range" {
		t.Errorf("scope shown as %q", got)
	}
	keys, _, err := e.keys.List(t.Context(), apikeys.Filter{UserID: e.dev.ID, Limit: 10})
	if err != nil || len(keys) != 1 {
		t.Fatalf("keys %v, %v", keys, err)
	}
	k := keys[0]
	if !slices.Equal(k.AllowedRoutes, []string{"GET /api/search", "/api/items/{id}"}) || len(k.AllowedCIDRs) != 1 || !k.ReadOnly {
		t.Errorf("stored scope %v %v %v", k.AllowedRoutes, k.AllowedCIDRs, k.ReadOnly)
	}
}
