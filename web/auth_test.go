package web_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/web"
)

func sessionCookie(res response) *http.Cookie {
	for _, c := range res.Cookies() {
		if c.Name == "sluice_session" {
			return c
		}
	}
	return nil
}

func TestSignIn(t *testing.T) {
	e := newEnv(t)
	tests := []struct {
		name       string
		email      string
		password   string
		header     http.Header
		wantStatus int
		wantTo     string
		wantCookie bool
		wantSecure bool
		wantError  string
	}{
		{name: "OperatorGoesToDashboard", email: operatorEmail, password: testPassword,
			wantStatus: http.StatusSeeOther, wantTo: "/admin", wantCookie: true},
		{name: "DeveloperGoesToPortal", email: developerEmail, password: testPassword,
			wantStatus: http.StatusSeeOther, wantTo: "/app", wantCookie: true},
		{name: "EmailCaseIgnored", email: strings.ToUpper(operatorEmail), password: testPassword,
			wantStatus: http.StatusSeeOther, wantTo: "/admin", wantCookie: true},
		{name: "SecureBehindTrustedTLSProxy", email: operatorEmail, password: testPassword,
			header:     http.Header{"X-Forwarded-Proto": {"https"}},
			wantStatus: http.StatusSeeOther, wantTo: "/admin", wantCookie: true, wantSecure: true},
		{name: "WrongPassword", email: operatorEmail, password: "not the password",
			wantStatus: http.StatusUnauthorized, wantError: "Wrong email or password."},
		{name: "UnknownEmail", email: "nobody@example.com", password: testPassword,
			wantStatus: http.StatusUnauthorized, wantError: "Wrong email or password."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := e.anonymous()
			res := c.post("/signin", url.Values{"email": {tt.email}, "password": {tt.password}}, tt.header)
			if res.StatusCode != tt.wantStatus {
				t.Fatalf("status = %d, want %d", res.StatusCode, tt.wantStatus)
			}
			if got := res.Header.Get("Location"); got != tt.wantTo {
				t.Errorf("Location = %q, want %q", got, tt.wantTo)
			}
			ck := sessionCookie(res)
			if (ck != nil) != tt.wantCookie {
				t.Fatalf("session cookie set = %v, want %v", ck != nil, tt.wantCookie)
			}
			if ck != nil {
				if !ck.HttpOnly || ck.SameSite != http.SameSiteLaxMode || ck.Secure != tt.wantSecure {
					t.Errorf("cookie HttpOnly=%v SameSite=%v Secure=%v, want true Lax %v", ck.HttpOnly, ck.SameSite, ck.Secure, tt.wantSecure)
				}
			}
			if got := text(res.doc(t), "signin-error"); got != tt.wantError {
				t.Errorf("error = %q, want %q", got, tt.wantError)
			}
		})
	}
}

func TestSignInRedirectStaysOnSite(t *testing.T) {
	e := newEnv(t)
	for _, tt := range []struct{ next, want string }{
		{"/admin/keys", "/admin/keys"},
		{"//evil.example/x", "/admin"},
		{"https://evil.example/", "/admin"},
		{"/\\evil.example", "/admin"},
	} {
		t.Run(tt.next, func(t *testing.T) {
			res := e.anonymous().post("/signin", url.Values{"email": {operatorEmail}, "password": {testPassword}, "next": {tt.next}}, nil)
			if got := res.Header.Get("Location"); res.StatusCode != http.StatusSeeOther || got != tt.want {
				t.Errorf("status %d Location %q, want 303 %q", res.StatusCode, got, tt.want)
			}
		})
	}
}

func TestSignInStartsANewSession(t *testing.T) {
	e := newEnv(t)
	c := e.signedIn(developerEmail)
	u, _ := url.Parse(e.srv.URL)
	before := c.http.Jar.Cookies(u)[0].Value
	res := c.post("/signin", url.Values{"email": {operatorEmail}, "password": {testPassword}}, nil)
	after := sessionCookie(res)
	if after == nil || after.Value == before {
		t.Fatalf("sign-in kept the previous session cookie")
	}
	if got := c.get("/admin/plans", nil); got.StatusCode != http.StatusOK {
		t.Errorf("as operator after second sign-in: status %d, want 200", got.StatusCode)
	}
}

func TestSignOutEndsTheSession(t *testing.T) {
	e := newEnv(t)
	c := e.signedIn(operatorEmail)
	if res := c.get("/admin/plans", nil); res.StatusCode != http.StatusOK {
		t.Fatalf("signed in: status %d", res.StatusCode)
	}
	res := c.post("/signout", nil, nil)
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/signin" {
		t.Fatalf("sign out: status %d Location %q", res.StatusCode, res.Header.Get("Location"))
	}
	if ck := sessionCookie(res); ck == nil || ck.MaxAge >= 0 {
		t.Fatalf("sign out did not expire the cookie: %+v", ck)
	}
	res = c.get("/admin/plans", nil)
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/signin?next=%2Fadmin%2Fplans" {
		t.Errorf("after sign out: status %d Location %q, want redirect to sign in", res.StatusCode, res.Header.Get("Location"))
	}
}

func TestSignInRateLimitedPerAccount(t *testing.T) {
	e := newEnv(t)
	c := e.anonymous()
	// Ten attempts per account per 15 minutes; the eleventh is refused
	// even with the right password.
	for i := range 10 {
		res := c.post("/signin", url.Values{"email": {operatorEmail}, "password": {"guess"}}, nil)
		if res.StatusCode != http.StatusUnauthorized {
			t.Fatalf("attempt %d: status %d, want 401", i+1, res.StatusCode)
		}
	}
	res := c.post("/signin", url.Values{"email": {operatorEmail}, "password": {testPassword}}, nil)
	if res.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("11th attempt: status %d, want 429", res.StatusCode)
	}
	msg := text(res.doc(t), "signin-limited")
	if !strings.HasPrefix(msg, "Too many sign-in attempts. Try again in ") {
		t.Errorf("message = %q", msg)
	}
	if res.Header.Get("Retry-After") == "" {
		t.Errorf("no Retry-After")
	}
	if sessionCookie(res) != nil {
		t.Errorf("a limited attempt started a session")
	}
	// Another account from the same address is not affected.
	if res := c.post("/signin", url.Values{"email": {developerEmail}, "password": {testPassword}}, nil); res.StatusCode != http.StatusSeeOther {
		t.Errorf("other account: status %d, want 303", res.StatusCode)
	}
}

func TestSignInRateLimitedPerAddress(t *testing.T) {
	e := newEnv(t)
	c := e.anonymous()
	for i := range 20 {
		email := "guess" + string(rune('a'+i)) + "@example.com"
		if res := c.post("/signin", url.Values{"email": {email}, "password": {"guess"}}, nil); res.StatusCode != http.StatusUnauthorized {
			t.Fatalf("attempt %d: status %d, want 401", i+1, res.StatusCode)
		}
	}
	res := c.post("/signin", url.Values{"email": {operatorEmail}, "password": {testPassword}}, nil)
	if res.StatusCode != http.StatusTooManyRequests || count(res.doc(t), "signin-limited") != 1 {
		t.Fatalf("21st attempt from one address: status %d, want 429 with the message", res.StatusCode)
	}
}

func TestCrossOriginPostsAreRejected(t *testing.T) {
	e := newEnv(t)
	tests := []struct {
		name   string
		header http.Header
		want   int
	}{
		{"CrossSiteFetchMetadata", http.Header{"Sec-Fetch-Site": {"cross-site"}}, http.StatusForbidden},
		{"ForeignOrigin", http.Header{"Origin": {"https://evil.example"}}, http.StatusForbidden},
		{"SameOriginFetchMetadata", http.Header{"Sec-Fetch-Site": {"same-origin"}}, http.StatusSeeOther},
		{"NoBrowserHeaders", nil, http.StatusSeeOther},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := e.signedIn(operatorEmail)
			res := c.post("/admin/plans", url.Values{"slug": {"x-" + strings.ToLower(tt.name)}, "name": {"X"}}, tt.header)
			if res.StatusCode != tt.want {
				t.Fatalf("status %d, want %d", res.StatusCode, tt.want)
			}
			_, err := e.plans.GetBySlug(t.Context(), "x-"+strings.ToLower(tt.name))
			if created := err == nil; created != (tt.want == http.StatusSeeOther) {
				t.Errorf("plan created = %v (err %v), want %v", created, err, tt.want == http.StatusSeeOther)
			}
		})
	}
	t.Run("SignInFromAnotherSite", func(t *testing.T) {
		res := e.anonymous().post("/signin", url.Values{"email": {operatorEmail}, "password": {testPassword}},
			http.Header{"Sec-Fetch-Site": {"cross-site"}})
		if res.StatusCode != http.StatusForbidden || sessionCookie(res) != nil {
			t.Errorf("status %d cookie %v, want 403 and no session", res.StatusCode, sessionCookie(res) != nil)
		}
	})
}

var errBoom = errors.New("dial tcp 10.0.0.7:6379: connection refused")

func TestUnhealthyDependencyShowsBannerWithoutInternals(t *testing.T) {
	e := newEnv(t)
	c := e.signedIn(operatorEmail)
	if n := count(c.get("/admin/plans", nil).doc(t), "banner-unhealthy"); n != 0 {
		t.Fatalf("healthy: %d banners", n)
	}
	e.health.err = errBoom
	// The health result is cached for two seconds.
	deadline := time.Now().Add(5 * time.Second)
	for {
		res := c.get("/admin/plans", nil)
		d := res.doc(t)
		if got := text(d, "banner-unhealthy"); got != "" {
			if !strings.HasPrefix(got, "Redis is unreachable") {
				t.Errorf("banner = %q", got)
			}
			if strings.Contains(res.body, "10.0.0.7") || strings.Contains(res.body, "connection refused") {
				t.Errorf("page shows the internal error text")
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no banner within 5 s of the dependency failing")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// downStore is a rate-limit store whose backend is unreachable.
type downStore struct{}

func (downStore) Allow(context.Context, enforce.Request) (enforce.Decision, error) {
	return enforce.Decision{}, fmt.Errorf("dial redis: %w", enforce.ErrStoreUnavailable)
}

func (downStore) Peek(context.Context, enforce.Request) (enforce.Decision, error) {
	return enforce.Decision{}, fmt.Errorf("dial redis: %w", enforce.ErrStoreUnavailable)
}

func TestSignInLimitedLocallyWhenTheStoreIsDown(t *testing.T) {
	e := newEnvWith(t, func(d *web.Deps) { d.Limiter = downStore{} })
	c := e.anonymous()
	if res := c.post("/signin", url.Values{"email": {operatorEmail}, "password": {testPassword}}, nil); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-in with the store down: status %d, want 303", res.StatusCode)
	}
	for i := range 9 {
		if res := c.post("/signin", url.Values{"email": {operatorEmail}, "password": {"guess"}}, nil); res.StatusCode != http.StatusUnauthorized {
			t.Fatalf("attempt %d: status %d, want 401", i+2, res.StatusCode)
		}
	}
	if res := c.post("/signin", url.Values{"email": {operatorEmail}, "password": {testPassword}}, nil); res.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("11th attempt with the store down: status %d, want 429", res.StatusCode)
	}
}
