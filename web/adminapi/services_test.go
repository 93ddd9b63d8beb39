package adminapi

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/services"
)

func TestServices(t *testing.T) {
	e := newEnv(t)
	_, token := e.operator("op@example.com")
	billing := map[string]any{"slug": "billing", "name": "Billing", "hosts": []string{"billing.example.com"},
		"upstream_url": "http://10.0.0.5:8080", "routes": []string{"GET /invoices/{id}", "POST /invoices"}}

	res := e.do("POST", Prefix+"/services", token, billing)
	if res.status != http.StatusCreated || res.header.Get("Location") != Prefix+"/services/billing" {
		t.Fatalf("create: %d %s", res.status, res.body)
	}
	var s services.Service
	res.decode(t, &s)
	if s.Version != 1 || !slices.Equal(s.Routes, []string{"GET /invoices/{id}", "POST /invoices"}) {
		t.Errorf("created %+v", s)
	}

	t.Run("Refusals", func(t *testing.T) {
		tests := []struct {
			name       string
			body       map[string]any
			wantStatus int
			wantField  string
			wantReason string
		}{
			{"BadPattern", map[string]any{"slug": "a", "name": "A", "routes": []string{"GET /x/{id"}}, 400, "routes[0]", "bad wildcard"},
			{"NoMethod", map[string]any{"slug": "a", "name": "A", "routes": []string{"/x"}}, 400, "routes[0]", "needs a method"},
			{"ConflictWithinService", map[string]any{"slug": "a", "name": "A", "routes": []string{"GET /x/{a}", "GET /x/{b}"}}, 400, "routes[1]", "conflicts"},
			{"ConflictWithAnotherService", map[string]any{"slug": "a", "name": "A", "routes": []string{"GET /invoices/{n}"}}, 400, "routes[0]", "another service"},
			{"BadUpstream", map[string]any{"slug": "a", "name": "A", "upstream_url": "ftp://x"}, 400, "upstream_url", "http or https"},
			{"SlugTaken", map[string]any{"slug": "billing", "name": "Again"}, 409, "slug", "taken"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				res := e.do("POST", Prefix+"/services", token, tt.body)
				if res.status != tt.wantStatus {
					t.Fatalf("status %d, want %d: %s", res.status, tt.wantStatus, res.body)
				}
				p := res.problem(t)
				found := false
				for _, f := range p.Errors {
					if f.Field == tt.wantField && strings.Contains(f.Message, tt.wantReason) {
						found = true
					}
				}
				if !found {
					t.Errorf("errors %+v: want %s saying %q", p.Errors, tt.wantField, tt.wantReason)
				}
			})
		}
	})

	t.Run("StaleUpdate", func(t *testing.T) {
		body := map[string]any{"version": s.Version + 1, "slug": "billing", "name": "B"}
		if res := e.do("PUT", Prefix+"/services/billing", token, body); res.status != http.StatusConflict {
			t.Errorf("status %d, want 409: %s", res.status, res.body)
		}
	})

	t.Run("UpdateGetToken", func(t *testing.T) {
		body := map[string]any{"version": s.Version, "slug": "billing", "name": "Billing v2", "routes": []string{"GET /invoices/{id}"}}
		res := e.do("PUT", Prefix+"/services/billing", token, body)
		if res.status != http.StatusOK {
			t.Fatalf("update: %d %s", res.status, res.body)
		}
		res = e.do("GET", Prefix+"/services/billing", token, nil)
		var got services.Service
		res.decode(t, &got)
		if got.Name != "Billing v2" || got.Version != 2 || len(got.Routes) != 1 || len(got.Hosts) != 0 {
			t.Errorf("after update: %+v", got)
		}
		res = e.do("POST", Prefix+"/services/billing/tokens", token, map[string]any{"name": "guard"})
		var tok serviceTokenWithSecret
		res.decode(t, &tok)
		if res.status != http.StatusCreated || !strings.HasPrefix(tok.Secret, services.TokenPrefix) || !strings.HasPrefix(tok.Secret, tok.Prefix) {
			t.Fatalf("token: %d %s", res.status, res.body)
		}
		if res := e.do("POST", Prefix+"/services/billing/tokens/"+itoa(tok.ID)+"/revoke", token, nil); res.status != http.StatusNoContent {
			t.Errorf("revoke: %d %s", res.status, res.body)
		}
		if res := e.do("POST", Prefix+"/services/billing/tokens/"+itoa(tok.ID)+"/revoke", token, nil); res.status != http.StatusNotFound {
			t.Errorf("second revoke: %d, want 404", res.status)
		}
	})

	t.Run("DeleteAndNotFound", func(t *testing.T) {
		if res := e.do("DELETE", Prefix+"/services/billing", token, nil); res.status != http.StatusNoContent {
			t.Fatalf("delete: %d %s", res.status, res.body)
		}
		if res := e.do("GET", Prefix+"/services/billing", token, nil); res.status != http.StatusNotFound {
			t.Errorf("get after delete: %d", res.status)
		}
		// The demo service's routes are named by no tier here, but the
		// list still holds it.
		res := e.do("GET", Prefix+"/services", token, nil)
		var list serviceList
		res.decode(t, &list)
		if len(list.Items) != 1 || list.Items[0].Slug != services.DemoSlug {
			t.Errorf("list = %+v, want the demo service only", list.Items)
		}
	})
}
