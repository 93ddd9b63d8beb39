package web_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/internal/egress"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/sso"
	"github.com/sluicehq/sluice/internal/sso/ssotest"
	"github.com/sluicehq/sluice/internal/users"
	"github.com/sluicehq/sluice/web"
)

// lockedBuffer collects the UI's log lines, written from its handlers'
// goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// ssoEnv is a UI whose SSO goes to a real OpenID Connect provider running
// in the test.
type ssoEnv struct {
	*env
	idp *ssotest.Provider
	log *lockedBuffer
}

// newSSOEnv starts a provider and a UI registered with it under policy.
func newSSOEnv(t *testing.T, policy sso.Policy) *ssoEnv {
	t.Helper()
	// The callback URL names the UI's address, so the address is taken
	// before the UI is built.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	redirect := "http://" + ln.Addr().String() + sso.CallbackPath
	idp := ssotest.Start(t, redirect)
	logs := &lockedBuffer{}
	e := newEnvWith(t, func(d *web.Deps) {
		d.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		// As cmd/portal wires it: the provider reached through the egress
		// dialer with the Internal policy.
		hc := egress.NewDialer(egress.Options{Rules: egress.Rules{Policy: egress.Internal}}).Client(egress.ClientOptions{MaxRedirects: 3})
		d.SSO = sso.New(sso.Config{Issuer: idp.URL, ClientID: ssotest.ClientID, ClientSecret: ssotest.ClientSecret, RedirectURL: redirect}, hc)
		d.SSOPolicy = policy
	})
	handler := e.srv.Config.Handler
	e.srv.Close()
	e.srv = &httptest.Server{Listener: ln, Config: &http.Server{Handler: handler}}
	e.srv.Start()
	t.Cleanup(e.srv.Close)
	return &ssoEnv{env: e, idp: idp, log: logs}
}

// ssoSignIn runs a sign-in with SSO in c's browser as person: it follows
// every redirect from /signin/sso?next= through the provider, and returns
// the UI's answer to the callback. tamper, when set, rewrites the
// callback's URL first.
func (e *ssoEnv) ssoSignIn(c *client, person *ssotest.Person, next string, tamper func(*url.URL)) response {
	e.t.Helper()
	if person != nil {
		e.idp.SignInAs(*person)
	} else {
		e.idp.Refuse()
	}
	target := e.srv.URL + "/signin/sso"
	if next != "" {
		target += "?next=" + url.QueryEscape(next)
	}
	for range 10 {
		u, _ := url.Parse(target)
		isCallback := strings.HasPrefix(target, e.srv.URL+sso.CallbackPath)
		if isCallback && tamper != nil {
			tamper(u)
		}
		req, _ := http.NewRequest(http.MethodGet, u.String(), nil)
		res := c.do(req)
		if isCallback {
			return res
		}
		loc, err := res.Location()
		if err != nil {
			e.t.Fatalf("GET %s: status %d, no redirect: %s", target, res.StatusCode, res.body)
		}
		target = loc.String()
	}
	e.t.Fatal("sign-in with SSO never came back to the callback")
	return response{}
}

var (
	opGroupPerson = ssotest.Person{Subject: "sub-ops-1", Email: "grace@corp.example", EmailVerified: true, Groups: []string{"staff", "sluice-operators"}}
	domainPerson  = ssotest.Person{Subject: "sub-ops-2", Email: "linus@ops.example", EmailVerified: true}
	outsider      = ssotest.Person{Subject: "sub-out-1", Email: "mallory@corp.example", EmailVerified: true, Groups: []string{"staff"}}
)

var operatorPolicy = sso.Policy{OperatorGroups: []string{"sluice-operators"}, OperatorDomains: []string{"ops.example"}}

func TestSSOSignInOperators(t *testing.T) {
	e := newSSOEnv(t, operatorPolicy)
	ctx := context.Background()

	t.Run("SignInPageOffersSSO", func(t *testing.T) {
		d := e.anonymous().get("/signin?next=/admin/keys", nil).doc(t)
		href, _ := d.Find(`[data-testid="signin-sso"]`).Attr("href")
		if href != "/signin/sso?next=%2Fadmin%2Fkeys" || text(d, "signin-sso") != "Sign in with SSO" {
			t.Fatalf("SSO link = %q (%q)", href, text(d, "signin-sso"))
		}
	})
	t.Run("GroupClaimMakesOperator", func(t *testing.T) {
		c := e.anonymous()
		res := e.ssoSignIn(c, &opGroupPerson, "", nil)
		if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/admin" {
			t.Fatalf("callback: %d to %q: %s", res.StatusCode, res.Header.Get("Location"), res.body)
		}
		if got := c.get("/admin", nil); got.StatusCode != http.StatusOK {
			t.Fatalf("operator console after SSO: %d", got.StatusCode)
		}
		u, err := e.users.ByEmail(ctx, opGroupPerson.Email)
		if err != nil || u.Role != users.RoleOperator {
			t.Fatalf("account made by SSO: %+v, %v", u, err)
		}
		// Its password is no way in.
		if _, err := e.users.Authenticate(ctx, u.Email, ""); !errors.Is(err, users.ErrBadCredentials) {
			t.Fatalf("empty password on an SSO account: %v", err)
		}
	})
	t.Run("DomainClaimMakesOperatorAndKeepsNext", func(t *testing.T) {
		c := e.anonymous()
		res := e.ssoSignIn(c, &domainPerson, "/admin/keys", nil)
		if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/admin/keys" {
			t.Fatalf("callback: %d to %q", res.StatusCode, res.Header.Get("Location"))
		}
		if got := c.get("/admin/keys", nil); got.StatusCode != http.StatusOK {
			t.Fatalf("operator page after SSO: %d", got.StatusCode)
		}
	})
	t.Run("LinksExistingOperatorByVerifiedEmail", func(t *testing.T) {
		c := e.anonymous()
		p := ssotest.Person{Subject: "sub-op-existing", Email: strings.ToUpper(operatorEmail), EmailVerified: true, Groups: []string{"sluice-operators"}}
		if res := e.ssoSignIn(c, &p, "", nil); res.StatusCode != http.StatusSeeOther {
			t.Fatalf("callback: %d: %s", res.StatusCode, res.body)
		}
		d := c.get("/account", nil)
		if d.StatusCode != http.StatusOK || !strings.Contains(d.body, operatorEmail) {
			t.Fatalf("signed in as someone else: %d", d.StatusCode)
		}
	})
	t.Run("OutsideGroupRefused", func(t *testing.T) {
		c := e.anonymous()
		res := e.ssoSignIn(c, &outsider, "", nil)
		if res.StatusCode != http.StatusForbidden || !strings.Contains(text(res.doc(t), "sso-problem"), "not in a group") {
			t.Fatalf("outsider: %d: %s", res.StatusCode, text(res.doc(t), "sso-problem"))
		}
		if got := c.get("/admin", nil); got.StatusCode != http.StatusSeeOther || !strings.HasPrefix(got.Header.Get("Location"), "/signin") {
			t.Fatalf("outsider reached the console: %d", got.StatusCode)
		}
		if _, err := e.users.ByEmail(ctx, outsider.Email); !errors.Is(err, users.ErrNotFound) {
			t.Fatalf("an account was made for the outsider: %v", err)
		}
	})
	t.Run("OperatorLeftGroupRefused", func(t *testing.T) {
		left := opGroupPerson
		left.Groups = []string{"staff"}
		res := e.ssoSignIn(e.anonymous(), &left, "", nil)
		if res.StatusCode != http.StatusForbidden {
			t.Fatalf("an operator out of the group: %d: %s", res.StatusCode, text(res.doc(t), "sso-problem"))
		}
	})
	t.Run("DeveloperEmailInGroupRefused", func(t *testing.T) {
		p := ssotest.Person{Subject: "sub-dev-in-group", Email: developerEmail, EmailVerified: true, Groups: []string{"sluice-operators"}}
		res := e.ssoSignIn(e.anonymous(), &p, "", nil)
		if res.StatusCode != http.StatusForbidden || !strings.Contains(text(res.doc(t), "sso-problem"), "developer account") {
			t.Fatalf("developer account in the operator group: %d: %s", res.StatusCode, text(res.doc(t), "sso-problem"))
		}
		if u, _ := e.users.ByID(ctx, e.dev.ID); u.Role != users.RoleDeveloper {
			t.Fatalf("the developer became %s", u.Role)
		}
	})
	t.Run("SignOutEndsSession", func(t *testing.T) {
		c := e.anonymous()
		if res := e.ssoSignIn(c, &opGroupPerson, "", nil); res.StatusCode != http.StatusSeeOther {
			t.Fatalf("callback: %d", res.StatusCode)
		}
		srvURL, _ := url.Parse(e.srv.URL)
		old := c.http.Jar.Cookies(srvURL)
		// The page's form-action lets the sign-out form go on to the
		// provider.
		if csp := c.get("/admin", nil).Header.Get("Content-Security-Policy"); !strings.Contains(csp, "form-action 'self' "+e.idp.URL+";") {
			t.Fatalf("CSP = %q, want the provider's origin among the form targets", csp)
		}
		res := c.post("/signout", nil, nil)
		loc, _ := res.Location()
		if res.StatusCode != http.StatusSeeOther || loc == nil || !strings.HasPrefix(loc.String(), e.idp.URL+"/end_session?") {
			t.Fatalf("sign out: %d to %v, want the provider's end_session_endpoint", res.StatusCode, loc)
		}
		q := loc.Query()
		if q.Get("id_token_hint") == "" || q.Get("client_id") != ssotest.ClientID || q.Get("post_logout_redirect_uri") != e.srv.URL+"/signin" {
			t.Fatalf("end-session query: %v", q)
		}
		// The provider ends its session for the person and sends the
		// browser back to the sign-in page.
		before := len(e.idp.Ended())
		req, _ := http.NewRequest(http.MethodGet, loc.String(), nil)
		back := c.do(req)
		if back.StatusCode != http.StatusFound || back.Header.Get("Location") != e.srv.URL+"/signin" {
			t.Fatalf("provider's end session: %d to %q", back.StatusCode, back.Header.Get("Location"))
		}
		ended := e.idp.Ended()
		if len(ended) != before+1 || ended[before] != (ssotest.EndedSession{Subject: opGroupPerson.Subject, ClientID: ssotest.ClientID}) {
			t.Fatalf("provider's ended sessions: %+v", ended)
		}
		if got := c.get("/admin", nil); got.StatusCode != http.StatusSeeOther {
			t.Fatalf("console after sign-out: %d", got.StatusCode)
		}
		// The cookie from before the sign-out names a session that is gone.
		replay := e.anonymous()
		replay.http.Jar.SetCookies(srvURL, old)
		if got := replay.get("/admin", nil); got.StatusCode != http.StatusSeeOther {
			t.Fatalf("console with the old session cookie: %d", got.StatusCode)
		}
	})
	t.Run("PasswordSessionSignsOutHere", func(t *testing.T) {
		c := e.signedIn(operatorEmail)
		before := len(e.idp.Ended())
		res := c.post("/signout", nil, nil)
		if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/signin" || len(e.idp.Ended()) != before {
			t.Fatalf("password session's sign-out: %d to %q", res.StatusCode, res.Header.Get("Location"))
		}
	})
	t.Run("TamperedStateRefused", func(t *testing.T) {
		c := e.anonymous()
		res := e.ssoSignIn(c, &opGroupPerson, "", func(u *url.URL) {
			q := u.Query()
			q.Set("state", q.Get("state")+"A")
			u.RawQuery = q.Encode()
		})
		if res.StatusCode != http.StatusBadRequest || text(res.doc(t), "sso-problem") == "" {
			t.Fatalf("tampered state: %d", res.StatusCode)
		}
		if got := c.get("/admin", nil); got.StatusCode != http.StatusSeeOther {
			t.Fatalf("console after a tampered state: %d", got.StatusCode)
		}
	})
	t.Run("CallbackInAnotherBrowserRefused", func(t *testing.T) {
		// A callback carried to another browser (login CSRF) finds no flow
		// cookie there.
		other := e.anonymous()
		var stolen string
		e.ssoSignIn(e.anonymous(), &opGroupPerson, "", func(u *url.URL) {
			stolen = u.String()
			u.RawQuery = "" // the first browser's own callback is spent on nothing
		})
		req, _ := http.NewRequest(http.MethodGet, stolen, nil)
		if res := other.do(req); res.StatusCode != http.StatusBadRequest {
			t.Fatalf("callback in another browser: %d", res.StatusCode)
		}
		if got := other.get("/admin", nil); got.StatusCode != http.StatusSeeOther {
			t.Fatalf("other browser reached the console: %d", got.StatusCode)
		}
	})
	t.Run("CancelledAtProvider", func(t *testing.T) {
		res := e.ssoSignIn(e.anonymous(), nil, "", nil)
		if res.StatusCode != http.StatusUnauthorized || text(res.doc(t), "sso-problem") == "" {
			t.Fatalf("cancelled at the provider: %d", res.StatusCode)
		}
	})
	t.Run("NothingSecretInLogs", func(t *testing.T) {
		logs := e.log.String()
		if !strings.Contains(logs, "method=sso") {
			t.Fatalf("no SSO sign-in logged: %s", logs)
		}
		secrets := append(e.idp.Secrets(), ssotest.ClientSecret)
		if len(secrets) < 5 {
			t.Fatalf("the provider issued only %d codes and tokens", len(secrets))
		}
		for _, s := range secrets {
			if strings.Contains(logs, s) {
				t.Fatalf("a code, token or the client secret is in the log: %s", logs)
			}
		}
		if strings.Contains(logs, "state=") || strings.Contains(logs, "code=") {
			t.Fatalf("a callback URL is in the log: %s", logs)
		}
	})
}

func TestSSODevelopers(t *testing.T) {
	policy := operatorPolicy
	policy.Developers = true
	e := newSSOEnv(t, policy)
	ctx := context.Background()
	free, err := e.plans.Create(ctx, "test", plans.PlanInput{Slug: "free", Name: "Free", IsPublic: true, IsDefault: true})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("NewDeveloperOnDefaultPlan", func(t *testing.T) {
		c := e.anonymous()
		res := e.ssoSignIn(c, &outsider, "", nil)
		if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/app" {
			t.Fatalf("developer via SSO: %d to %q: %s", res.StatusCode, res.Header.Get("Location"), text(res.doc(t), "sso-problem"))
		}
		if got := c.get("/app/keys", nil); got.StatusCode != http.StatusOK {
			t.Fatalf("developer portal: %d", got.StatusCode)
		}
		if got := c.get("/admin", nil); got.StatusCode != http.StatusForbidden {
			t.Fatalf("a developer via SSO reached the console: %d", got.StatusCode)
		}
		u, err := e.users.ByEmail(ctx, outsider.Email)
		if err != nil || u.Role != users.RoleDeveloper || u.PlanID == nil || *u.PlanID != free.ID {
			t.Fatalf("developer account: %+v, %v", u, err)
		}
	})
	t.Run("AccountWithoutPasswordOffersNoPasswordChange", func(t *testing.T) {
		c := e.anonymous()
		if res := e.ssoSignIn(c, &outsider, "", nil); res.StatusCode != http.StatusSeeOther {
			t.Fatalf("callback: %d", res.StatusCode)
		}
		d := c.get("/account", nil).doc(t)
		if d.Find(`[data-testid="password-form"]`).Length() != 0 || !strings.Contains(text(d, "no-password"), "has no password") {
			t.Fatalf("SSO account's page: password form %d, note %q", d.Find(`[data-testid="password-form"]`).Length(), text(d, "no-password"))
		}
		res := c.post("/account/password", url.Values{"current_password": {"anything at all"}, "new_password": {"a brand new passphrase"}}, nil)
		if res.StatusCode != http.StatusConflict || !strings.Contains(res.body, "no password to change") {
			t.Fatalf("password change of an SSO account: %d", res.StatusCode)
		}
		// An account with a password, signed in by SSO, still has the form.
		p := ssotest.Person{Subject: "sub-dev-pw", Email: developerEmail, EmailVerified: true}
		withPassword := e.anonymous()
		if res := e.ssoSignIn(withPassword, &p, "", nil); res.StatusCode != http.StatusSeeOther {
			t.Fatalf("callback: %d", res.StatusCode)
		}
		d = withPassword.get("/account", nil).doc(t)
		if d.Find(`[data-testid="password-form"]`).Length() != 1 || d.Find(`[data-testid="no-password"]`).Length() != 0 {
			t.Fatal("an account with a password lost its password form")
		}
	})
	t.Run("DisabledUserRefused", func(t *testing.T) {
		p := ssotest.Person{Subject: "sub-dev", Email: developerEmail, EmailVerified: true}
		if _, err := e.users.SetDisabled(ctx, e.dev.ID, true); err != nil {
			t.Fatal(err)
		}
		c := e.anonymous()
		res := e.ssoSignIn(c, &p, "", nil)
		if res.StatusCode != http.StatusForbidden || !strings.Contains(text(res.doc(t), "sso-problem"), "disabled") {
			t.Fatalf("disabled developer: %d: %s", res.StatusCode, text(res.doc(t), "sso-problem"))
		}
		if got := c.get("/app", nil); got.StatusCode != http.StatusSeeOther {
			t.Fatalf("disabled developer reached the portal: %d", got.StatusCode)
		}
		if _, err := e.users.SetDisabled(ctx, e.dev.ID, false); err != nil {
			t.Fatal(err)
		}
		if res := e.ssoSignIn(c, &p, "", nil); res.StatusCode != http.StatusSeeOther {
			t.Fatalf("enabled again: %d", res.StatusCode)
		}
		// Disabled while signed in: the session stands no more.
		if _, err := e.users.SetDisabled(ctx, e.dev.ID, true); err != nil {
			t.Fatal(err)
		}
		if got := c.get("/app", nil); got.StatusCode != http.StatusSeeOther {
			t.Fatalf("disabled while signed in with SSO: %d", got.StatusCode)
		}
	})
	t.Run("UnverifiedEmailRefused", func(t *testing.T) {
		p := ssotest.Person{Subject: "sub-unverified", Email: "new@example.org"}
		res := e.ssoSignIn(e.anonymous(), &p, "", nil)
		if res.StatusCode != http.StatusForbidden || !strings.Contains(text(res.doc(t), "sso-problem"), "did not vouch") {
			t.Fatalf("unverified email: %d", res.StatusCode)
		}
	})
}

func TestSSOOffWithoutProvider(t *testing.T) {
	e := newEnv(t)
	c := e.anonymous()
	if n := count(c.get("/signin", nil).doc(t), "signin-sso"); n != 0 {
		t.Fatalf("SSO link without a provider: %d", n)
	}
	if got := c.get("/signin/sso", nil); got.StatusCode != http.StatusNotFound {
		t.Fatalf("/signin/sso without a provider: %d", got.StatusCode)
	}
}

func TestSSOProviderDown(t *testing.T) {
	// Nothing listens on port 1: discovery fails, and the person is told.
	e := newEnvWith(t, func(d *web.Deps) {
		hc := egress.NewDialer(egress.Options{Rules: egress.Rules{Policy: egress.Internal}}).Client(egress.ClientOptions{})
		d.SSO = sso.New(sso.Config{Issuer: "http://127.0.0.1:1", ClientID: "c", ClientSecret: "s", RedirectURL: "http://127.0.0.1:2" + sso.CallbackPath}, hc)
		d.SSOPolicy = operatorPolicy
	})
	res := e.anonymous().get("/signin/sso", nil)
	if res.StatusCode != http.StatusBadGateway || !strings.Contains(text(res.doc(t), "sso-problem"), "could not be reached") {
		t.Fatalf("provider down: %d: %s", res.StatusCode, text(res.doc(t), "sso-problem"))
	}
	if len(res.Cookies()) != 0 {
		t.Fatalf("a flow cookie was set for a sign-in that never began: %v", res.Cookies())
	}
}
