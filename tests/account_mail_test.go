package tests

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/testenv"
)

// TestPortalAccountEmails: the built portal, configured with
// PORTAL_SMTP_URL and PORTAL_PUBLIC_URL, mails a sign-up confirmation and a
// reset link to a real SMTP server; a browser follows both links from the
// received mail. Neither the links' tokens nor the SMTP password reach the
// log.
func TestPortalAccountEmails(t *testing.T) {
	const smtpPassword = "the smtp relay's password"
	smtp := testenv.SMTP(t, testenv.SMTPOptions{User: "portal", Pass: smtpPassword})
	const public = "http://portal.example"
	p := startPortalWith(t, portalConfig{env: map[string]string{
		"PORTAL_SMTP_URL":   smtp.URL(),
		"PORTAL_SMTP_FROM":  "Sluice <noreply@portal.example>",
		"PORTAL_PUBLIC_URL": public,
	}})
	if _, err := p.Plans.Create(context.Background(), "test", plans.PlanInput{
		Slug: "starter", Name: "Starter", IsPublic: true, IsDefault: true,
	}); err != nil {
		t.Fatalf("create default plan: %v", err)
	}
	// linkIn is the path of the link under public+prefix in the body.
	linkIn := func(m testenv.Mail, prefix string) string {
		t.Helper()
		found := regexp.MustCompile(regexp.QuoteMeta(public+prefix) + `[A-Za-z0-9_-]+`).FindString(m.Body())
		if found == "" {
			t.Fatalf("no %s%s... link in:\n%s", public, prefix, m.Body())
		}
		return strings.TrimPrefix(found, public)
	}
	ctx := browser(t, 120*time.Second)
	const email, chosen = "newcomer@example.com", "a long enough passphrase"

	do(t, ctx, "sign up",
		chromedp.Navigate(p.URL+"/signup"),
		chromedp.WaitVisible(tid("signup-form")),
		chromedp.SendKeys(tid("signup-email"), email),
		chromedp.SendKeys(tid("signup-password"), chosen),
		chromedp.Click(tid("signup-submit")),
		chromedp.WaitVisible(tid("signup-sent")),
	)
	got := smtp.WaitFor(t, 1)
	if !got[0].Authed || got[0].To[0] != email {
		t.Fatalf("the confirmation: authed %v, to %v", got[0].Authed, got[0].To)
	}
	confirm := linkIn(got[0], "/signup/confirm/")
	do(t, ctx, "open the confirmation link",
		chromedp.Navigate(p.URL+confirm),
		chromedp.WaitVisible(tid("confirm-form")),
		chromedp.SendKeys(tid("confirm-password"), chosen),
		chromedp.Click(tid("confirm-submit")),
		chromedp.WaitVisible(tid("create-key-form")),
	)
	if got := textOf(t, ctx, "viewer-email"); got != email {
		t.Fatalf("signed in as %q, want %q", got, email)
	}

	do(t, ctx, "ask for a reset link",
		chromedp.Navigate(p.URL+"/password/forgot"),
		chromedp.WaitVisible(tid("forgot-form")),
		chromedp.SendKeys(tid("forgot-email"), email),
		chromedp.Click(tid("forgot-submit")),
		chromedp.WaitVisible(tid("forgot-sent")),
	)
	got = smtp.WaitFor(t, 2)
	reset := linkIn(got[1], "/reset/")
	do(t, ctx, "open the reset link",
		chromedp.Navigate(p.URL+reset),
		chromedp.WaitVisible(tid("reset-password-form")),
		chromedp.SendKeys(tid("reset-password"), "a brand new passphrase"),
		chromedp.Click(tid("reset-submit")),
		chromedp.WaitVisible(tid("signin-form")),
		chromedp.SendKeys(tid("signin-email"), email),
		chromedp.SendKeys(tid("signin-password"), "a brand new passphrase"),
		chromedp.Click(tid("signin-submit")),
		chromedp.WaitVisible(tid("viewer-email")),
	)
	do(t, ctx, "the used link", chromedp.Navigate(p.URL+reset), chromedp.WaitVisible(tid("reset-invalid")))

	b, err := os.ReadFile(p.Log)
	if err != nil {
		t.Fatal(err)
	}
	for name, secret := range map[string]string{
		"the confirmation token": strings.TrimPrefix(confirm, "/signup/confirm/"),
		"the reset token":        strings.TrimPrefix(reset, "/reset/"),
		"the SMTP password":      smtpPassword,
		"the chosen password":    chosen,
	} {
		if strings.Contains(string(b), secret) {
			t.Errorf("the portal's log holds %s", name)
		}
	}
}
