package services

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestMuxMatchesServeMux routes a table of requests through Mux.Match and
// through a real http.ServeMux holding the same patterns, and requires both
// to agree with each other and with the expected pattern on every path the
// ServeMux routes as sent. On a path it would redirect (unclean, or
// missing its trailing slash) or not find only for a trailing slash too
// many, Match names the route the canonical path is served by instead
// (redirect: the wanted pattern), so that the spelling counts under it.
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
		want                    string // "" for no route (404 or 405)
		// canonical: ServeMux does not route the path as sent (it
		// redirects, or the slash is one too many), Match routes its
		// canonical form.
		canonical bool
	}{
		{"wildcard", "GET", "x.test", "/items/7", "GET /items/{id}", false},
		{"literal beats wildcard", "GET", "x.test", "/items/new", "GET /items/new", false},
		{"HEAD served by GET", "HEAD", "x.test", "/items/7", "GET /items/{id}", false},
		{"other method of the path", "DELETE", "x.test", "/items/7", "DELETE /items/{id}", false},
		{"method not allowed", "PATCH", "x.test", "/items/7", "", false},
		{"POST without GET", "GET", "x.test", "/items", "", false},
		{"query ignored", "POST", "x.test", "/items?draft=1", "POST /items", false},
		{"rest wildcard", "GET", "x.test", "/files/a/b/c.txt", "GET /files/{path...}", false},
		{"rest wildcard empty", "GET", "x.test", "/files/", "GET /files/{path...}", false},
		{"{$} only the slash", "GET", "x.test", "/docs/", "GET /docs/{$}", false},
		{"subtree below {$}", "GET", "x.test", "/docs/intro", "GET /docs/", false},
		{"missing trailing slash", "GET", "x.test", "/docs", "GET /docs/{$}", true},
		{"trailing slash on exact", "GET", "x.test", "/exact/", "GET /exact", true},
		{"exact", "GET", "x.test", "/exact", "GET /exact", false},
		{"host pattern wins on its host", "GET", "api.example.com", "/items/7", "GET api.example.com/items/{id}", false},
		{"host pattern with a port", "GET", "api.example.com:8443", "/items/7", "GET api.example.com/items/{id}", false},
		{"unclean path", "GET", "x.test", "/items/../items/7", "GET /items/{id}", true},
		{"double slash", "GET", "x.test", "//items/7", "GET /items/{id}", true},
		{"subtree needs method", "GET", "x.test", "/dirs/a", "", false},
		{"subtree", "PUT", "x.test", "/dirs/a/b", "PUT /dirs/", false},
		{"escaped slash stays in segment", "GET", "x.test", "/items/a%2Fb", "GET /items/{id}", false},
		{"unknown", "GET", "x.test", "/nothing", "", false},
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
			if !c.canonical && got != stdGot {
				t.Errorf("Match = %q, http.ServeMux served %q (status %d)", got, stdGot, rec.Code)
			}
			if c.canonical && stdGot != "" {
				t.Errorf("http.ServeMux served %q as sent: not a canonical-only case", stdGot)
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

// TestMuxMatchesEverySpelling holds Match to the canonical form: every
// spelling of a declared path that a server may route to the same handler
// counts under the declared route (issue 30, item 6).
func TestMuxMatchesEverySpelling(t *testing.T) {
	var m Mux
	for _, p := range []string{"GET /api/search", "GET /api/items/{id}", "GET /api/items/new",
		"GET /{rest...}", "GET /docs/", "GET /Reports/{id}"} {
		if err := m.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct{ uri, want string }{
		{"/api/search", "GET /api/search"},
		{"/api/search?q=x", "GET /api/search"},
		{"/api/search;x=1", "GET /api/search"},
		{"/api;v=2/search;x=1?q=x", "GET /api/search"},
		{"/api/search/", "GET /api/search"},
		{"/API/search", "GET /api/search"},
		{"/Api/SEARCH/", "GET /api/search"},
		{"/api//search", "GET /api/search"},
		{"//api///search", "GET /api/search"},
		{"/api/%73earch", "GET /api/search"},
		{"/%61%70%69/%53EARCH", "GET /api/search"},
		{"/api/./search", "GET /api/search"},
		{"/x/../api/search", "GET /api/search"},
		{"/api/search/..;/search", "GET /api/search"},
		{"/api/%2e%2e/api/search", "GET /api/search"},
		{"/api%2Fsearch", "GET /api/search"},
		{"/api%5Csearch", "GET /api/search"},
		{`/api\search`, "GET /api/search"},
		{"/api/items/7", "GET /api/items/{id}"},
		{"/API/ITEMS/7/", "GET /api/items/{id}"},
		{"/api/items/new/", "GET /api/items/new"},
		{"/api/items/a%2Fb", "GET /api/items/{id}"},
		{"/reports/9", "GET /Reports/{id}"},
		{"/docs", "GET /docs/"},
		{"/elsewhere", "GET /{rest...}"},
	}
	for _, c := range cases {
		got, ok := m.Match("GET", "x.test", c.uri)
		if got != c.want || !ok {
			t.Errorf("Match(%q) = %q, %v; want %q", c.uri, got, ok, c.want)
		}
	}
}

func TestMuxRefusesRoutesEqualButForCase(t *testing.T) {
	var m Mux
	if err := m.Add("GET /items/{id}"); err != nil {
		t.Fatal(err)
	}
	err := m.Add("GET /Items/{name}")
	if err == nil || !strings.Contains(err.Error(), `"GET /items/{id}"`) || !strings.Contains(err.Error(), "letter case") {
		t.Fatalf("Add(GET /Items/{name}) = %v, want a refusal naming GET /items/{id} and letter case", err)
	}
	if err := m.Add("POST /Items/{name}"); err != nil {
		t.Errorf("another method refused: %v", err)
	}
	// Stored before the rule: the catalog still builds, and the path in
	// any case counts under the first.
	c, err := NewCatalog([]Service{{Slug: "old", Routes: []string{"GET /items/{id}", "GET /Items/{id}"}}})
	if err != nil {
		t.Fatalf("NewCatalog refused stored routes equal but for case: %v", err)
	}
	if _, p, ok := c.Match("GET", "x.test", "/ITEMS/1"); !ok || p != "GET /items/{id}" {
		t.Errorf("Match = %q, %v; want GET /items/{id}", p, ok)
	}
}

// BenchmarkMuxMatch is one route lookup as /v1/check makes it, on a clean
// path (the common case) and on a spelling that needs canonicalizing.
func BenchmarkMuxMatch(b *testing.B) {
	var m Mux
	for _, p := range []string{"GET /api/search", "GET /api/items/{id}", "POST /api/reports", "GET /api/jobs/{id}",
		"GET /files/{path...}", "DELETE /api/items/{id}"} {
		if err := m.Add(p); err != nil {
			b.Fatal(err)
		}
	}
	for _, uri := range []string{"/api/items/42?full=1", "/API//items/./42/"} {
		b.Run(uri, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				m.Match("GET", "api.example.com", uri)
			}
		})
	}
}

// FuzzCanonicalFastPath holds the allocation-free check to the full
// canonicalization: a path it passes as canonical is one the full one
// leaves unchanged.
func FuzzCanonicalFastPath(f *testing.F) {
	for _, s := range []string{"/", "/api/search", "/api/search/", "/a/./b", "/a/../b", "/a/.b", "/a/..b/", "/.", "/..",
		"//a", "/a;b", "/A", "/%41", `/a\b`, "/é", "/a,b:c@d+e$"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, escaped string) {
		if !isCanonical(escaped) {
			return
		}
		if got := canonicalizeSlow(escaped, false); got.path != escaped {
			t.Errorf("isCanonical(%q), but canonicalizeSlow gives %q", escaped, got.path)
		}
	})
}

func TestMuxKeepsWildcardNamesApart(t *testing.T) {
	var m Mux
	if err := m.Add("GET /Orgs/{ID}/users/{id}"); err != nil {
		t.Fatalf("wildcards differing in case refused: %v", err)
	}
	if got, ok := m.Match("GET", "x.test", "/orgs/1/USERS/2"); !ok || got != "GET /Orgs/{ID}/users/{id}" {
		t.Errorf("Match = %q, %v", got, ok)
	}
}
