package web_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestSessionCookieScope: the session cookie is HttpOnly, SameSite=Lax,
// Path=/ with no Domain, and over HTTPS named with the __Host- prefix, so
// no script (a proxied page's included) reads it and no other page of the
// host name (the reverse proxy's listener on another port, a sibling host)
// can plant one the portal would take (issue 30, items 1 and 2).
func TestSessionCookieScope(t *testing.T) {
	e := newEnv(t) // trusts 127.0.0.1
	signIn := func(header http.Header) *http.Cookie {
		t.Helper()
		res := e.anonymous().post("/signin", url.Values{"email": {operatorEmail}, "password": {testPassword}}, header)
		if res.StatusCode != http.StatusSeeOther {
			t.Fatalf("sign in: status %d", res.StatusCode)
		}
		var found *http.Cookie
		for _, c := range res.Cookies() {
			if strings.Contains(c.Name, "sluice_session") {
				if found != nil {
					t.Errorf("two session cookies set: %s and %s", found.Name, c.Name)
				}
				found = c
			}
		}
		if found == nil {
			t.Fatal("no session cookie set")
		}
		if !found.HttpOnly || found.SameSite != http.SameSiteLaxMode || found.Path != "/" || found.Domain != "" {
			t.Errorf("cookie %s: HttpOnly %v SameSite %v Path %q Domain %q; want HttpOnly, Lax, / and none",
				found.Name, found.HttpOnly, found.SameSite, found.Path, found.Domain)
		}
		return found
	}
	// present sends GET /admin with the cookie under name and says whether
	// it was taken as signed in.
	present := func(name, value string, header http.Header) bool {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, e.srv.URL+"/admin", nil)
		for k, v := range header {
			req.Header[k] = v
		}
		req.AddCookie(&http.Cookie{Name: name, Value: value})
		res := e.anonymous().do(req)
		return res.StatusCode == http.StatusOK
	}

	t.Run("PlainHTTP", func(t *testing.T) {
		c := signIn(nil)
		if c.Name != "sluice_session" || c.Secure {
			t.Errorf("cookie %s Secure %v, want sluice_session without Secure", c.Name, c.Secure)
		}
		if !present(c.Name, c.Value, nil) {
			t.Error("the cookie does not sign in")
		}
	})
	t.Run("HTTPS", func(t *testing.T) {
		https := http.Header{"X-Forwarded-Proto": {"https"}}
		c := signIn(https)
		if c.Name != "__Host-sluice_session" || !c.Secure {
			t.Errorf("cookie %s Secure %v, want __Host-sluice_session, Secure", c.Name, c.Secure)
		}
		if !present(c.Name, c.Value, https) {
			t.Error("the __Host- cookie does not sign in")
		}
		// A page of the host name without HTTPS, or on another port, can
		// set a plain cookie of the old name, not a __Host- one.
		if present("sluice_session", c.Value, https) {
			t.Error("over HTTPS a plain sluice_session cookie signs in")
		}
	})
}
