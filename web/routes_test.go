package web_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/static"
	"github.com/sluicehq/sluice/web"
)

// TestOperatorRoutesCheckTheRole walks every operator route as an anonymous
// visitor, a developer and an operator: the role is checked on the route,
// not only hidden in menus.
func TestOperatorRoutesCheckTheRole(t *testing.T) {
	e := newEnv(t)
	p := e.createPlan("gold", searchTier)
	k, _ := e.createKey(e.dev.ID, "ci")
	tier := p.Limits[0].ID
	plan := fmt.Sprint(p.ID)
	key := fmt.Sprint(k.ID)
	routes := []struct {
		method, path string
		// okStatus is what an operator gets (POSTs here are deliberately
		// incomplete forms, so their status is a validation answer).
		okStatus int
	}{
		{"GET", "/admin", http.StatusOK},
		{"GET", "/admin/live?keys=" + key, http.StatusOK},
		{"GET", "/admin/plans", http.StatusOK},
		{"GET", "/admin/plans/new", http.StatusOK},
		{"POST", "/admin/plans", http.StatusUnprocessableEntity},
		{"GET", "/admin/plans/" + plan, http.StatusOK},
		{"POST", "/admin/plans/" + plan, http.StatusUnprocessableEntity},
		// Tier edits without a version lose to the plan's current one.
		{"POST", "/admin/plans/" + plan + "/limits", http.StatusConflict},
		{"GET", fmt.Sprintf("/admin/plans/%s/limits/%d", plan, tier), http.StatusSeeOther},
		{"GET", fmt.Sprintf("/admin/plans/%s/limits/%d/edit", plan, tier), http.StatusOK},
		{"POST", fmt.Sprintf("/admin/plans/%s/limits/%d", plan, tier), http.StatusConflict},
		{"POST", fmt.Sprintf("/admin/plans/%s/limits/%d/delete", plan, tier), http.StatusConflict},
		{"GET", "/admin/keys", http.StatusOK},
		{"GET", "/admin/keys/" + key, http.StatusOK},
		{"POST", "/admin/keys/" + key + "/plan", http.StatusSeeOther},
		{"POST", "/admin/keys/" + key + "/overrides", http.StatusUnprocessableEntity},
		{"POST", "/admin/keys/" + key + "/overrides/delete", http.StatusConflict},
		{"GET", "/admin/keys/" + key + "/revoke", http.StatusOK},
		{"GET", "/admin/keys/new", http.StatusOK},
		{"POST", "/admin/plans/" + plan + "/delete", http.StatusConflict},
		{"POST", "/admin/plans/" + plan + "/clone", http.StatusSeeOther},
		{"POST", "/admin/keys", http.StatusUnprocessableEntity},
		{"GET", "/admin/keys/" + key + "/secret", http.StatusOK},
		{"POST", "/admin/keys/" + key + "/rotate", http.StatusBadRequest},
		{"POST", "/admin/keys/" + key + "/expiry", http.StatusSeeOther},
		{"GET", "/admin/developers", http.StatusOK},
		{"POST", fmt.Sprintf("/admin/developers/%d/plan", e.dev.ID), http.StatusConflict},
		{"GET", fmt.Sprintf("/admin/developers/%d", e.dev.ID), http.StatusOK},
		{"POST", fmt.Sprintf("/admin/developers/%d/quota-grants", e.dev.ID), http.StatusUnprocessableEntity},
		{"POST", fmt.Sprintf("/admin/developers/%d/quota-resets", e.dev.ID), http.StatusUnprocessableEntity},
		{"POST", fmt.Sprintf("/admin/developers/%d/billing-anchor", e.dev.ID), http.StatusUnprocessableEntity},
		{"GET", "/admin/audit", http.StatusOK},
	}
	anon, dev, op := e.anonymous(), e.signedIn(developerEmail), e.signedIn(operatorEmail)
	call := func(c *client, method, path string, h http.Header) response {
		if method == "POST" {
			return c.post(path, url.Values{}, h)
		}
		return c.get(path, h)
	}
	for _, rt := range routes {
		t.Run(rt.method+" "+rt.path, func(t *testing.T) {
			res := call(anon, rt.method, rt.path, nil)
			if rt.method == "GET" {
				if res.StatusCode != http.StatusSeeOther || !strings.HasPrefix(res.Header.Get("Location"), "/signin?next=") {
					t.Errorf("anonymous page: status %d Location %q, want 303 to sign in", res.StatusCode, res.Header.Get("Location"))
				}
			} else if res.StatusCode != http.StatusUnauthorized {
				t.Errorf("anonymous POST: status %d, want 401", res.StatusCode)
			}
			if res := call(anon, rt.method, rt.path, htmx); res.StatusCode != http.StatusUnauthorized || res.Header.Get("HX-Redirect") == "" {
				t.Errorf("anonymous fragment: status %d HX-Redirect %q, want 401 with HX-Redirect", res.StatusCode, res.Header.Get("HX-Redirect"))
			}
			res = call(dev, rt.method, rt.path, nil)
			if res.StatusCode != http.StatusForbidden {
				t.Errorf("developer: status %d, want 403", res.StatusCode)
			}
			if got := text(res.doc(t), "error-status"); got != "403 Forbidden" {
				t.Errorf("developer page heading = %q", got)
			}
			if res := call(op, rt.method, rt.path, nil); res.StatusCode != rt.okStatus {
				t.Errorf("operator: status %d, want %d", res.StatusCode, rt.okStatus)
			}
		})
	}
	// The revocation route runs last: it changes the key for good.
	t.Run("POST revoke", func(t *testing.T) {
		path := "/admin/keys/" + key + "/revoke"
		if res := anon.post(path, nil, nil); res.StatusCode != http.StatusUnauthorized {
			t.Errorf("anonymous: %d", res.StatusCode)
		}
		if res := dev.post(path, nil, nil); res.StatusCode != http.StatusForbidden {
			t.Errorf("developer: %d", res.StatusCode)
		}
		if res := op.post(path, nil, nil); res.StatusCode != http.StatusSeeOther {
			t.Errorf("operator: %d", res.StatusCode)
		}
	})
}

func TestHomeSendsEachRoleToItsPlace(t *testing.T) {
	e := newEnv(t)
	for _, tt := range []struct {
		name string
		c    *client
		want string
	}{
		{"Anonymous", e.anonymous(), "/signin"},
		{"Operator", e.signedIn(operatorEmail), "/admin"},
		{"Developer", e.signedIn(developerEmail), "/app"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res := tt.c.get("/", nil)
			if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != tt.want {
				t.Errorf("status %d Location %q, want 303 %q", res.StatusCode, res.Header.Get("Location"), tt.want)
			}
		})
	}
}

func TestStaticAssetsAreCompressedOnRequest(t *testing.T) {
	e := newEnv(t)
	c := e.anonymous()
	plain, err := static.FS.ReadFile(static.HTMX)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, accept, wantEncoding string
	}{
		{"Gzip", "gzip, deflate, br", "gzip"},
		{"Identity", "identity", ""},
		{"GzipRefused", "gzip;q=0", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res := c.get("/static/"+static.HTMX, http.Header{"Accept-Encoding": {tt.accept}})
			if got := res.Header.Get("Content-Encoding"); got != tt.wantEncoding {
				t.Fatalf("Content-Encoding %q, want %q", got, tt.wantEncoding)
			}
			body := []byte(res.body)
			if tt.wantEncoding == "gzip" {
				zr, err := gzip.NewReader(bytes.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				if body, err = io.ReadAll(zr); err != nil {
					t.Fatal(err)
				}
				if len(res.body) >= len(plain)/2 {
					t.Errorf("gzipped %d bytes of %d", len(res.body), len(plain))
				}
			}
			if !bytes.Equal(body, plain) {
				t.Errorf("body differs from the embedded file (%d vs %d bytes)", len(body), len(plain))
			}
			if !strings.Contains(res.Header.Get("Vary"), "Accept-Encoding") {
				t.Errorf("Vary %q", res.Header.Get("Vary"))
			}
		})
	}
}

func TestStaticAssetsAreImmutable(t *testing.T) {
	e := newEnv(t)
	c := e.anonymous()
	for _, tt := range []struct {
		path, wantType string
		wantStatus     int
	}{
		{"/static/htmx-2.0.11.min.js", "text/javascript; charset=utf-8", http.StatusOK},
		{"/static/htmx-ext-sse-2.2.4.min.js", "text/javascript; charset=utf-8", http.StatusOK},
		{"/static/sluice-3.css", "text/css; charset=utf-8", http.StatusOK},
		{"/static/missing.js", "text/plain; charset=utf-8", http.StatusNotFound},
		{"/static/..%2fstatic.go", "text/plain; charset=utf-8", http.StatusNotFound},
	} {
		t.Run(tt.path, func(t *testing.T) {
			res := c.get(tt.path, nil)
			if res.StatusCode != tt.wantStatus || res.Header.Get("Content-Type") != tt.wantType {
				t.Fatalf("status %d type %q, want %d %q", res.StatusCode, res.Header.Get("Content-Type"), tt.wantStatus, tt.wantType)
			}
			wantCache := ""
			if tt.wantStatus == http.StatusOK {
				wantCache = "public, max-age=31536000, immutable"
			}
			if got := res.Header.Get("Cache-Control"); got != wantCache {
				t.Errorf("Cache-Control = %q, want %q", got, wantCache)
			}
		})
	}
}

func TestLayoutMarksTheCurrentSection(t *testing.T) {
	e := newEnv(t)
	c := e.signedIn(operatorEmail)
	for _, tt := range []struct{ path, section string }{
		{"/admin", "usage"}, {"/admin/plans", "plans"}, {"/admin/keys", "keys"},
		{"/admin/developers", "developers"}, {"/admin/audit", "audit"},
	} {
		t.Run(tt.path, func(t *testing.T) {
			d := c.get(tt.path, nil).doc(t)
			cur := d.Find(`nav [aria-current="page"]`)
			if cur.Length() != 1 {
				t.Fatalf("%d current entries", cur.Length())
			}
			if id, _ := cur.Attr("data-testid"); id != "nav-"+tt.section {
				t.Errorf("current = %q, want nav-%s", id, tt.section)
			}
			if got := text(d, "viewer-email"); got != operatorEmail {
				t.Errorf("viewer = %q", got)
			}
		})
	}
}

func TestUnknownPathsGetThePage(t *testing.T) {
	e := newEnv(t)
	res := e.signedIn(operatorEmail).get("/admin/no-such-page", nil)
	d := res.doc(t)
	if res.StatusCode != http.StatusNotFound || text(d, "error-status") != "404 Not Found" || count(d, "nav") != 1 {
		t.Errorf("status %d heading %q nav %d", res.StatusCode, text(d, "error-status"), count(d, "nav"))
	}
}

func TestPostgresDownShowsTheOutageNotInternals(t *testing.T) {
	var pool interface{ Ping(context.Context) error }
	e := newEnvWith(t, func(d *web.Deps) {
		pool = d.Pool
		d.Health = []web.HealthCheck{{Name: "Postgres", Check: func(ctx context.Context) error { return pool.Ping(ctx) }}}
	})
	c := e.signedIn(operatorEmail)
	e.pool.Close()
	res := c.get("/admin/plans", nil)
	d := res.doc(t)
	if res.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503", res.StatusCode)
	}
	if got := text(d, "error-message"); got != "Postgres cannot be reached right now, so this page cannot be shown. Try again shortly." {
		t.Errorf("message %q", got)
	}
	if got := text(d, "banner-unhealthy"); !strings.HasPrefix(got, "Postgres is unreachable") {
		t.Errorf("banner %q", got)
	}
	if strings.Contains(res.body, "closed pool") || strings.Contains(res.body, "pgx") {
		t.Errorf("the page shows internal error text")
	}
}

// TestSecurityHeaders: every UI response, signed in or not, allows only the
// site's own scripts and styles and forbids framing; the browser tests watch
// every page for violations of the policy.
func TestSecurityHeaders(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		name string
		c    *client
		path string
	}{
		{"SignInPage", e.anonymous(), "/signin"},
		{"Redirect", e.anonymous(), "/"},
		{"OperatorDashboard", e.signedIn(operatorEmail), "/admin"},
		{"DeveloperKeys", e.signedIn(developerEmail), "/app/keys"},
		{"NotFound", e.anonymous(), "/no-such-page"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := tc.c.get(tc.path, nil)
			for header, want := range map[string]string{
				"X-Frame-Options":        "DENY",
				"X-Content-Type-Options": "nosniff",
			} {
				if got := res.Header.Get(header); got != want {
					t.Errorf("%s %s = %q, want %q", tc.path, header, got, want)
				}
			}
			csp := res.Header.Get("Content-Security-Policy")
			for _, directive := range []string{"default-src 'self'", "script-src 'self'", "style-src 'self'", "frame-ancestors 'none'", "object-src 'none'"} {
				if !strings.Contains(csp, directive+";") && !strings.HasSuffix(csp, directive) {
					t.Errorf("%s Content-Security-Policy %q lacks %q", tc.path, csp, directive)
				}
			}
			if strings.Contains(csp, "unsafe") {
				t.Errorf("%s Content-Security-Policy %q allows unsafe sources", tc.path, csp)
			}
		})
	}
}
