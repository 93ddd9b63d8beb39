package web_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/signin"
	"github.com/sluicehq/sluice/web"
)

// sessionCookie is the session cookie res sets: sluice_session, or
// __Host-sluice_session over HTTPS.
func sessionCookie(res response) *http.Cookie {
	for _, c := range res.Cookies() {
		if c.Name == "sluice_session" || c.Name == "__Host-sluice_session" {
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

// redirectTargets are next= values, the forms browsers normalise among
// them, and where a sign-in may send the browser for each.
var redirectTargets = []struct{ next, want string }{
	{"/admin/keys", "/admin/keys"},
	{"/admin/keys?q=a%20b", "/admin/keys?q=a%20b"},
	{"//evil.example/x", "/"},
	{"https://evil.example/", "/"},
	{"https:evil.example", "/"},
	{"/\\evil.example", "/"},
	{"\\\\evil.example", "/"},
	{"/\t/evil.example/", "/"},
	{"/\n/evil.example/", "/"},
	{"/\r\n/evil.example/", "/"},
	{"/%2F/evil.example/", "/"},
	{"/%2f%2fevil.example", "/"},
	{"/%5Cevil.example", "/"},
	{"/a%2Fb", "/a%2Fb"},
	{"/admin#//evil.example", "/admin"},
	{"javascript:alert(1)", "/"},
	{" /admin", "/"},
}

func TestSignInRedirectStaysOnSite(t *testing.T) {
	e := newEnv(t)
	for _, tt := range redirectTargets {
		want := tt.want
		if want == "/" {
			want = "/admin" // where "/" sends an operator after signing in
		}
		t.Run("Post"+tt.next, func(t *testing.T) {
			res := e.anonymous().post("/signin", url.Values{"email": {operatorEmail}, "password": {testPassword}, "next": {tt.next}}, nil)
			if got := res.Header.Get("Location"); res.StatusCode != http.StatusSeeOther || got != want {
				t.Errorf("status %d Location %q, want 303 %q", res.StatusCode, got, want)
			}
		})
	}
	// A signed-in visitor of /signin is sent straight to next=.
	c := e.signedIn(operatorEmail)
	for _, tt := range redirectTargets {
		t.Run("SignedInGet"+tt.next, func(t *testing.T) {
			res := c.get("/signin?next="+url.QueryEscape(tt.next), nil)
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

// testClock is a settable clock for the UI.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *testClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newClockEnv(t *testing.T) (*env, *testClock) {
	c := &testClock{t: time.Now()}
	return newEnvWith(t, func(d *web.Deps) { d.Now = c.now }), c
}

// from makes a request appear to come from addr through the trusted proxy.
func from(addr string) http.Header { return http.Header{"X-Forwarded-For": {addr}} }

func signInAs(c *client, email, password, addr string) response {
	return c.post("/signin", url.Values{"email": {email}, "password": {password}}, from(addr))
}

// The review's finding: ten wrong passwords from ten addresses locked the
// operator out for 15 minutes. Now they only space the account's attempts
// out, by at most a minute, and the owner gets in after that wait.
func TestSignInGuessesFromManyAddressesDoNotLockTheOwner(t *testing.T) {
	e, clk := newClockEnv(t)
	c := e.anonymous()
	for i := range 10 {
		res := signInAs(c, operatorEmail, "wrong guess", fmt.Sprintf("203.0.113.%d", i+1))
		if res.StatusCode != http.StatusUnauthorized && res.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("guess %d: status %d", i+1, res.StatusCode)
		}
		if res.StatusCode == http.StatusTooManyRequests {
			clk.add(time.Minute)
		}
	}
	res := signInAs(c, operatorEmail, testPassword, "198.51.100.1")
	if res.StatusCode == http.StatusTooManyRequests {
		after, err := strconv.Atoi(res.Header.Get("Retry-After"))
		if err != nil || after < 1 || after > 60 {
			t.Fatalf("owner told to wait Retry-After %q, want 1 to 60 seconds", res.Header.Get("Retry-After"))
		}
		if !strings.HasPrefix(text(res.doc(t), "signin-limited"), "Too many failed sign-ins. Try again in ") {
			t.Errorf("message = %q", text(res.doc(t), "signin-limited"))
		}
		if sessionCookie(res) != nil {
			t.Errorf("a refused attempt started a session")
		}
		clk.add(time.Duration(after) * time.Second)
		res = signInAs(c, operatorEmail, testPassword, "198.51.100.1")
	}
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("owner after the wait: status %d, want 303", res.StatusCode)
	}
	// The success cleared the account's count: the next guess is not spaced.
	if res := signInAs(e.anonymous(), operatorEmail, "wrong guess", "203.0.113.50"); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("first guess after the owner's success: status %d, want 401", res.StatusCode)
	}
}

func TestSignInSuccessesAreNotCounted(t *testing.T) {
	e := newEnv(t)
	for i := range 40 {
		if res := signInAs(e.anonymous(), operatorEmail, testPassword, "192.0.2.1"); res.StatusCode != http.StatusSeeOther {
			t.Fatalf("sign-in %d: status %d, want 303", i+1, res.StatusCode)
		}
	}
}

func TestSignInFailuresLimitedPerAccountAndAddress(t *testing.T) {
	e, clk := newClockEnv(t)
	c := e.anonymous()
	// The pair's ten failures, spaced so the account's delay never binds.
	for i := range 10 {
		res := signInAs(c, operatorEmail, "guess", "192.0.2.1")
		if res.StatusCode != http.StatusUnauthorized {
			t.Fatalf("failure %d: status %d, want 401", i+1, res.StatusCode)
		}
		clk.add(time.Minute)
	}
	if res := signInAs(c, operatorEmail, testPassword, "192.0.2.1"); res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") == "" {
		t.Fatalf("11th attempt from the guessing address: status %d Retry-After %q, want 429 with Retry-After",
			res.StatusCode, res.Header.Get("Retry-After"))
	}
	if res := signInAs(c, operatorEmail, testPassword, "198.51.100.1"); res.StatusCode != http.StatusSeeOther {
		t.Errorf("owner from another address: status %d, want 303", res.StatusCode)
	}
	if res := signInAs(c, developerEmail, testPassword, "192.0.2.1"); res.StatusCode != http.StatusSeeOther {
		t.Errorf("another account from the guessing address: status %d, want 303", res.StatusCode)
	}
}

func TestSignInFailuresLimitedPerAddress(t *testing.T) {
	e := newEnv(t)
	c := e.anonymous()
	for i := range 30 {
		email := fmt.Sprintf("guess%d@example.com", i)
		if res := signInAs(c, email, "guess", "192.0.2.7"); res.StatusCode != http.StatusUnauthorized {
			t.Fatalf("failure %d: status %d, want 401", i+1, res.StatusCode)
		}
	}
	res := signInAs(c, operatorEmail, testPassword, "192.0.2.7")
	if res.StatusCode != http.StatusTooManyRequests || count(res.doc(t), "signin-limited") != 1 {
		t.Fatalf("31st attempt from one address: status %d, want 429 with the message", res.StatusCode)
	}
	if res := signInAs(c, operatorEmail, testPassword, "192.0.2.8"); res.StatusCode != http.StatusSeeOther {
		t.Errorf("a neighbouring address: status %d, want 303", res.StatusCode)
	}
}

func TestSignInPolicyIsASetting(t *testing.T) {
	e := newEnvWith(t, func(d *web.Deps) {
		d.SignIn = signin.DefaultPolicy()
		d.SignIn.AddressFailures = 2
	})
	c := e.anonymous()
	for range 2 {
		signInAs(c, "a@example.com", "guess", "192.0.2.1")
	}
	if res := signInAs(c, operatorEmail, testPassword, "192.0.2.1"); res.StatusCode != http.StatusTooManyRequests {
		t.Errorf("after 2 failures with AddressFailures 2: status %d, want 429", res.StatusCode)
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

// Failed sign-ins are counted in Postgres, so a Redis outage neither stops
// sign-in nor stops the counting.
func TestSignInCountsFailuresWhenTheStoreIsDown(t *testing.T) {
	e := newEnvWith(t, func(d *web.Deps) { d.Limiter = downStore{} })
	c := e.anonymous()
	if res := signInAs(c, operatorEmail, testPassword, "192.0.2.1"); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-in with the store down: status %d, want 303", res.StatusCode)
	}
	for i := range 30 {
		if res := signInAs(c, fmt.Sprintf("g%d@example.com", i), "guess", "192.0.2.1"); res.StatusCode != http.StatusUnauthorized {
			t.Fatalf("failure %d: status %d, want 401", i+1, res.StatusCode)
		}
	}
	if res := signInAs(c, operatorEmail, testPassword, "192.0.2.1"); res.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("after 30 failures with the store down: status %d, want 429", res.StatusCode)
	}
}
