package services

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestMuxMatchesServeMux routes a table of requests through Mux.Match and
// through a real http.ServeMux holding the same patterns, and requires both
// to agree with each other and with the expected pattern.
func TestMuxMatchesServeMux(t *testing.T) {
	patterns := []string{
		"GET /items/{id}",
		"GET /items/new",
		"POST /items",
		"GET /files/{path...}",
		"GET /docs/{$}",
		"GET /docs/",
		"DELETE /items/{id}",
		"GET api.example.com/items/{id}",
		"PUT /dirs/",
		"GET /exact",
	}
	cases := []struct {
		name, method, host, uri string
		want                    string // "" for no route (404, 405 or redirect)
	}{
		{"wildcard", "GET", "x.test", "/items/7", "GET /items/{id}"},
		{"literal beats wildcard", "GET", "x.test", "/items/new", "GET /items/new"},
		{"HEAD served by GET", "HEAD", "x.test", "/items/7", "GET /items/{id}"},
		{"other method of the path", "DELETE", "x.test", "/items/7", "DELETE /items/{id}"},
		{"method not allowed", "PATCH", "x.test", "/items/7", ""},
		{"POST without GET", "GET", "x.test", "/items", ""},
		{"query ignored", "POST", "x.test", "/items?draft=1", "POST /items"},
		{"rest wildcard", "GET", "x.test", "/files/a/b/c.txt", "GET /files/{path...}"},
		{"rest wildcard empty", "GET", "x.test", "/files/", "GET /files/{path...}"},
		{"{$} only the slash", "GET", "x.test", "/docs/", "GET /docs/{$}"},
		{"subtree below {$}", "GET", "x.test", "/docs/intro", "GET /docs/"},
		{"missing trailing slash redirects", "GET", "x.test", "/docs", ""},
		{"trailing slash on exact", "GET", "x.test", "/exact/", ""},
		{"exact", "GET", "x.test", "/exact", "GET /exact"},
		{"host pattern wins on its host", "GET", "api.example.com", "/items/7", "GET api.example.com/items/{id}"},
		{"host pattern with a port", "GET", "api.example.com:8443", "/items/7", "GET api.example.com/items/{id}"},
		{"unclean path redirects", "GET", "x.test", "/items/../items/7", ""},
		{"double slash redirects", "GET", "x.test", "//items/7", ""},
		{"subtree needs method", "GET", "x.test", "/dirs/a", ""},
		{"subtree", "PUT", "x.test", "/dirs/a/b", "PUT /dirs/"},
		{"escaped slash stays in segment", "GET", "x.test", "/items/a%2Fb", "GET /items/{id}"},
		{"unknown", "GET", "x.test", "/nothing", ""},
	}

	var m Mux
	std := http.NewServeMux()
	for _, p := range patterns {
		if err := m.Add(p); err != nil {
			t.Fatalf("Add(%q): %v", p, err)
		}
		std.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Pattern", r.Pattern)
		})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := m.Match(c.method, c.host, c.uri)
			if ok != (got != "") {
				t.Fatalf("Match = %q, %v: ok must say whether a pattern was found", got, ok)
			}
			req := httptest.NewRequest(c.method, "http://"+c.host+c.uri, nil)
			rec := httptest.NewRecorder()
			std.ServeHTTP(rec, req)
			stdGot := rec.Header().Get("X-Pattern")
			if got != stdGot {
				t.Errorf("Match = %q, http.ServeMux served %q (status %d)", got, stdGot, rec.Code)
			}
			if got != c.want {
				t.Errorf("Match = %q, want %q", got, c.want)
			}
		})
	}
}

func TestMuxAddRefuses(t *testing.T) {
	cases := []struct {
		name, first, pattern, reason string
	}{
		{"NoMethod", "", "/items", "needs a method"},
		{"Empty", "", "", "must not be empty"},
		{"BadWildcard", "", "GET /items/{id", "bad wildcard"},
		{"DuplicateWildcard", "", "GET /a/{x}/{x}", "duplicate wildcard"},
		{"Conflict", "GET /items/{id}", "GET /items/{name}", "conflicts with pattern"},
		{"Identical", "GET /items/{id}", "GET /items/{id}", "conflicts with pattern"},
		{"TooLong", "", "GET /" + strings.Repeat("a", MaxPatternLen), "at most"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var m Mux
			if c.first != "" {
				if err := m.Add(c.first); err != nil {
					t.Fatal(err)
				}
			}
			err := m.Add(c.pattern)
			if err == nil || !strings.Contains(err.Error(), c.reason) {
				t.Fatalf("Add(%q) = %v, want an error saying %q", c.pattern, err, c.reason)
			}
			if strings.HasPrefix(err.Error(), "http: ") {
				t.Errorf("error %q keeps net/http's prefix", err)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	ok := Input{Slug: "billing", Name: "Billing", Hosts: []string{"billing.example.com"},
		Upstream: "http://10.0.0.5:8080", Routes: []string{"GET /invoices/{id}", "POST /invoices"}}
	if err := Validate(ok); err != nil {
		t.Fatalf("valid input refused: %v", err)
	}
	bad := Input{Slug: "Bad Slug", Name: "", Hosts: []string{"https://x.example", "a.example", "a.example"},
		Upstream: "ftp://x", Routes: []string{"GET /a/{x}", "GET /a/{y}", "/nomethod"}}
	err := Validate(bad)
	for _, field := range []string{"slug", "name", "hosts[0]", "hosts[2]", "upstream_url", "routes[1]", "routes[2]"} {
		if ve, isVE := err.(interface{ Has(string) bool }); !isVE || !ve.Has(field) {
			t.Errorf("Validate(bad) = %v: no error for %s", err, field)
		}
	}
	if ve := err.(interface{ Has(string) bool }); ve.Has("routes[0]") || ve.Has("hosts[1]") {
		t.Errorf("Validate(bad) = %v: blames a valid entry", err)
	}
}

func TestCatalogMatch(t *testing.T) {
	c, err := NewCatalog([]Service{
		{Slug: "billing", Hosts: []string{"billing.example.com"}, Routes: []string{"GET /invoices/{id}"}},
		{Slug: "demo", Routes: []string{"GET /api/items/{id}", "POST /api/reports"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, method, host, uri, service, pattern string
	}{
		{"host-less service on any host", "GET", "whatever.test", "/api/items/3", "demo", "GET /api/items/{id}"},
		{"host service on its host", "GET", "Billing.Example.com:443", "/invoices/9", "billing", "GET /invoices/{id}"},
		{"host service elsewhere", "GET", "other.test", "/invoices/9", "", ""},
		{"no route", "GET", "billing.example.com", "/nothing", "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, p, ok := c.Match(tc.method, tc.host, tc.uri)
			if s.Slug != tc.service || p != tc.pattern || ok != (tc.pattern != "") {
				t.Errorf("Match = %q, %q, %v; want %q, %q", s.Slug, p, ok, tc.service, tc.pattern)
			}
		})
	}
	if _, err := NewCatalog([]Service{
		{Slug: "a", Routes: []string{"GET /x/{id}"}},
		{Slug: "b", Routes: []string{"GET /x/{name}"}},
	}); err == nil {
		t.Error("NewCatalog accepted two services with conflicting routes")
	}
}
