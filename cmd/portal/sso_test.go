package main

import (
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/sso/ssotest"
	"github.com/sluicehq/sluice/internal/testenv"
)

// ssoEnv is the settings of a portal signing operators in with p.
func ssoEnv(p *ssotest.Provider, redirect string) map[string]string {
	return map[string]string{
		"PORTAL_OIDC_ISSUER":          p.URL,
		"PORTAL_OIDC_CLIENT_ID":       ssotest.ClientID,
		"PORTAL_OIDC_CLIENT_SECRET":   ssotest.ClientSecret,
		"PORTAL_OIDC_REDIRECT_URL":    redirect,
		"PORTAL_OIDC_OPERATOR_GROUPS": "sluice-operators, sre",
	}
}

func TestSSOSettings(t *testing.T) {
	base := map[string]string{
		"PORTAL_OIDC_ISSUER":        "https://login.example.com/realms/staff",
		"PORTAL_OIDC_CLIENT_ID":     "portal",
		"PORTAL_OIDC_CLIENT_SECRET": "hunter2-hunter2",
		"PORTAL_OIDC_REDIRECT_URL":  "https://portal.example.com/signin/sso/callback",
	}
	with := func(changes map[string]string) map[string]string {
		env := map[string]string{}
		for k, v := range base {
			env[k] = v
		}
		for k, v := range changes {
			env[k] = v
		}
		return env
	}

	t.Run("Values", func(t *testing.T) {
		cfg, _, err := LoadConfig(nil, envOf(with(map[string]string{
			"PORTAL_OIDC_OPERATOR_GROUPS":  "ops, sre ,",
			"PORTAL_OIDC_OPERATOR_DOMAINS": "Example.COM",
			"PORTAL_OIDC_DEVELOPERS":       "true",
			"PORTAL_OIDC_GROUPS_CLAIM":     "roles",
			"PORTAL_OIDC_SCOPES":           "email,groups",
		})), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		s := cfg.SSO
		if s.Issuer != base["PORTAL_OIDC_ISSUER"] || s.ClientID != "portal" || s.ClientSecret != "hunter2-hunter2" ||
			s.RedirectURL != base["PORTAL_OIDC_REDIRECT_URL"] || !slices.Equal(s.OperatorGroups, []string{"ops", "sre"}) ||
			!slices.Equal(s.OperatorDomains, []string{"example.com"}) || !s.Developers || s.GroupsClaim != "roles" ||
			!slices.Equal(s.Scopes, []string{"email", "groups"}) {
			t.Fatalf("SSO config = %+v", s)
		}
		p := s.policy()
		if !slices.Equal(p.OperatorGroups, s.OperatorGroups) || !slices.Equal(p.OperatorDomains, s.OperatorDomains) || !p.Developers || p.GroupsClaim != "roles" {
			t.Fatalf("policy = %+v", p)
		}
	})
	t.Run("OffByDefault", func(t *testing.T) {
		cfg, _, err := LoadConfig(nil, envOf(nil), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.SSO.client(discardLogger()) != nil || cfg.SSO.GroupsClaim != "groups" || !slices.Equal(cfg.SSO.Scopes, []string{"email", "profile"}) {
			t.Fatalf("SSO config by default = %+v", cfg.SSO)
		}
	})

	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"ErrNoRole", with(nil), "invalid PORTAL_OIDC_OPERATOR_GROUPS (-oidc-operator-groups): PORTAL_OIDC_ISSUER is set but no group"},
		{"ErrNoIssuer", map[string]string{"PORTAL_OIDC_CLIENT_SECRET": "hunter2-hunter2"}, "invalid PORTAL_OIDC_ISSUER (-oidc-issuer): other PORTAL_OIDC_ settings are set"},
		{"ErrNoSecret", with(map[string]string{"PORTAL_OIDC_CLIENT_SECRET": "", "PORTAL_OIDC_DEVELOPERS": "true"}), "invalid PORTAL_OIDC_CLIENT_SECRET (-oidc-client-secret)"},
		{"ErrNoClientID", with(map[string]string{"PORTAL_OIDC_CLIENT_ID": "", "PORTAL_OIDC_DEVELOPERS": "true"}), "invalid PORTAL_OIDC_CLIENT_ID (-oidc-client-id)"},
		{"ErrNoRedirect", with(map[string]string{"PORTAL_OIDC_REDIRECT_URL": "", "PORTAL_OIDC_DEVELOPERS": "true"}), "invalid PORTAL_OIDC_REDIRECT_URL (-oidc-redirect-url): PORTAL_OIDC_ISSUER is set"},
		{"ErrPlainHTTPIssuer", with(map[string]string{"PORTAL_OIDC_ISSUER": "http://login.example.com"}), "invalid PORTAL_OIDC_ISSUER (-oidc-issuer) \"http://login.example.com\": http only to a loopback host"},
		{"ErrRedirectPath", with(map[string]string{"PORTAL_OIDC_REDIRECT_URL": "https://portal.example.com/callback"}), "the path must be /signin/sso/callback"},
		{"ErrDomain", with(map[string]string{"PORTAL_OIDC_OPERATOR_DOMAINS": "@example.com"}), "not a domain name"},
		{"ErrGroupsClaim", with(map[string]string{"PORTAL_OIDC_GROUPS_CLAIM": "my groups"}), "invalid PORTAL_OIDC_GROUPS_CLAIM (-oidc-groups-claim) \"my groups\": not a claim name"},
		{"ErrScopeOpenID", with(map[string]string{"PORTAL_OIDC_SCOPES": "openid,email"}), "not a scope: \"openid\""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := LoadConfig(nil, envOf(tt.env), io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %v, want it to contain %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("error reveals the client secret: %v", err)
			}
		})
	}
}

// TestRunSignsInWithSSO starts the portal with the PORTAL_OIDC_ settings
// against a provider run by the test, and signs in as a browser would.
func TestRunSignsInWithSSO(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	redirect := "http://" + addr + "/signin/sso/callback"
	idp := ssotest.Start(t, redirect)
	env := baseEnv(t)
	env["DATABASE_URL"] = testenv.PostgresURL(t)
	env["PORTAL_ADDR"] = addr
	for k, v := range ssoEnv(idp, redirect) {
		env[k] = v
	}
	p := startPortal(t, env)

	browser := func() *http.Client {
		jar, _ := cookiejar.New(nil)
		return &http.Client{Jar: jar, Timeout: 10 * time.Second}
	}
	// visit follows every redirect, as a browser does, and says where it
	// ended.
	visit := func(c *http.Client, method, path string) (int, string, string) {
		t.Helper()
		req, _ := http.NewRequest(method, p.url+path, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Request.URL.Path, string(b)
	}

	c := browser()
	if _, _, body := visit(c, http.MethodGet, "/signin"); !strings.Contains(body, "Sign in with SSO") {
		t.Fatalf("sign-in page offers no SSO:\n%s", body)
	}
	idp.SignInAs(ssotest.Person{Subject: "sre-1", Email: "sam@corp.example", EmailVerified: true, Groups: []string{"sre"}})
	if status, path, _ := visit(c, http.MethodGet, "/signin/sso"); status != http.StatusOK || path != "/admin" {
		t.Fatalf("after SSO: %d at %s, want the operator console", status, path)
	}
	if status, path, _ := visit(c, http.MethodPost, "/signout"); status != http.StatusOK || path != "/signin" {
		t.Fatalf("sign out: %d at %s", status, path)
	}
	if _, path, _ := visit(c, http.MethodGet, "/admin"); path != "/signin" {
		t.Fatalf("console after sign-out: at %s", path)
	}

	outsider := browser()
	idp.SignInAs(ssotest.Person{Subject: "dev-1", Email: "dana@corp.example", EmailVerified: true, Groups: []string{"staff"}})
	if status, _, body := visit(outsider, http.MethodGet, "/signin/sso"); status != http.StatusForbidden || !strings.Contains(body, "No access") {
		t.Fatalf("outsider: %d", status)
	}
	if _, path, _ := visit(outsider, http.MethodGet, "/admin"); path != "/signin" {
		t.Fatalf("outsider at %s", path)
	}

	logs := p.out.String()
	for _, s := range append(idp.Secrets(), ssotest.ClientSecret) {
		if strings.Contains(logs, s) {
			t.Fatalf("a code, token or the client secret is in the portal's output:\n%s", logs)
		}
	}
	if !strings.Contains(logs, "sign-in with SSO on") || !strings.Contains(logs, "method=sso") {
		t.Fatalf("the portal's output says nothing of SSO:\n%s", logs)
	}
	if u, _ := url.Parse(idp.URL); strings.Contains(logs, "error") && strings.Contains(logs, u.Host) {
		t.Fatalf("an error about the provider was logged:\n%s", logs)
	}
}
