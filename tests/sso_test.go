package tests

import (
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluicehq/sluice/internal/sso/ssotest"
)

// TestSSOInBrowser signs an operator in with SSO in a real browser, against
// a real OpenID Connect provider run by the test, signs out, and shows that
// someone outside the operator groups is refused with a page saying why.
func TestSSOInBrowser(t *testing.T) {
	// The callback URL names the portal's address, so it is chosen first.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	redirect := "http://" + addr + "/signin/sso/callback"
	idp := ssotest.Start(t, redirect)
	p := startPortalWith(t, portalConfig{env: map[string]string{
		"PORTAL_ADDR":                 addr,
		"PORTAL_OIDC_ISSUER":          idp.URL,
		"PORTAL_OIDC_CLIENT_ID":       ssotest.ClientID,
		"PORTAL_OIDC_CLIENT_SECRET":   ssotest.ClientSecret,
		"PORTAL_OIDC_REDIRECT_URL":    redirect,
		"PORTAL_OIDC_OPERATOR_GROUPS": "sluice-operators",
	}})
	ctx := browser(t, 60*time.Second)
	location := func() string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Location())
		if err != nil {
			t.Fatal(err)
		}
		u, _ := url.Parse(s)
		return u.Path
	}

	idp.SignInAs(ssotest.Person{Subject: "sub-op", Email: "ada@corp.example", EmailVerified: true, Groups: []string{"sluice-operators"}})
	do(t, ctx, "open the sign-in page", chromedp.Navigate(p.URL+"/signin?next=/admin/keys"), chromedp.WaitVisible(tid("signin-sso")))
	screenshot(t, ctx, "sso-signin-page")
	do(t, ctx, "sign in with SSO",
		chromedp.Click(tid("signin-sso")),
		chromedp.WaitVisible(tid("viewer-email")),
	)
	if got := textOf(t, ctx, "viewer-email"); got != "ada@corp.example" {
		t.Fatalf("signed in as %q", got)
	}
	if got := location(); got != "/admin/keys" {
		t.Fatalf("landed on %s, want /admin/keys", got)
	}
	screenshot(t, ctx, "sso-signed-in")

	do(t, ctx, "sign out", chromedp.Click(tid("signout")), chromedp.WaitVisible(tid("signin-form")))
	do(t, ctx, "console after sign-out", chromedp.Navigate(p.URL+"/admin"), chromedp.WaitVisible(tid("signin-form")))

	idp.SignInAs(ssotest.Person{Subject: "sub-out", Email: "eve@corp.example", EmailVerified: true, Groups: []string{"staff"}})
	do(t, ctx, "outsider signs in with SSO",
		chromedp.Navigate(p.URL+"/signin"),
		chromedp.WaitVisible(tid("signin-sso")),
		chromedp.Click(tid("signin-sso")),
		chromedp.WaitVisible(tid("sso-problem")),
	)
	if got := textOf(t, ctx, "sso-problem"); !strings.Contains(got, "not in a group") {
		t.Fatalf("outsider told %q", got)
	}
	screenshot(t, ctx, "sso-refused")
	do(t, ctx, "outsider to the console", chromedp.Navigate(p.URL+"/admin"), chromedp.WaitVisible(tid("signin-form")))
}
