package tests

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/users"
)

// TestPortalOrganisationInvite: in a browser, an owner invites a person by
// email; the person, signed in, opens the mailed link, joins, and sees the
// organisation's keys as their own page's (issue 37, item 1).
func TestPortalOrganisationInvite(t *testing.T) {
	smtp := testenv.SMTP(t, testenv.SMTPOptions{})
	const public = "http://portal.example"
	p := startPortalWith(t, portalConfig{env: map[string]string{
		"PORTAL_SMTP_URL":   smtp.URL(),
		"PORTAL_SMTP_FROM":  "Sluice <noreply@portal.example>",
		"PORTAL_PUBLIC_URL": public,
	}})
	ctx := context.Background()
	shared, _, err := p.Keys.Create(ctx, "test", apikeys.NewKey{UserID: p.Dev.ID, Name: "team backend"})
	if err != nil {
		t.Fatal(err)
	}
	const invitee = "teammate@example.com"
	if _, err := p.Users.Create(ctx, users.NewUser{Email: invitee, Password: password, Role: users.RoleDeveloper}); err != nil {
		t.Fatal(err)
	}
	b := browser(t, 120*time.Second)

	signIn(t, b, p.URL, p.Dev.Email)
	do(t, b, "invite the teammate",
		chromedp.Navigate(p.URL+"/app/org"),
		chromedp.WaitVisible(tid("invite-form")),
		chromedp.SendKeys(tid("invite-email"), invitee),
		chromedp.SetValue(tid("role-select"), "member"),
		chromedp.Click(tid("invite-submit")),
		chromedp.WaitVisible(tid("org-notice")),
		chromedp.WaitVisible(tid("invitation")),
		chromedp.Click(tid("signout")),
		chromedp.WaitVisible(tid("signin-form")),
	)
	got := smtp.WaitFor(t, 1)
	if got[0].To[0] != invitee {
		t.Fatalf("the invitation went to %v", got[0].To)
	}
	link := regexp.MustCompile(regexp.QuoteMeta(public+"/invitations/") + `[A-Za-z0-9_-]+`).FindString(got[0].Body())
	if link == "" {
		t.Fatalf("no invitation link in:\n%s", got[0].Body())
	}
	link = strings.TrimPrefix(link, public)

	signIn(t, b, p.URL, invitee)
	do(t, b, "accept the invitation",
		chromedp.Navigate(p.URL+link),
		chromedp.WaitVisible(tid("invitation-accept")),
		chromedp.Click(tid("invitation-accept")),
		chromedp.WaitVisible(tid("org-notice")),
	)
	if got := textOf(t, b, "org-name"); got != p.Dev.Email {
		t.Fatalf("working in %q, want the owner's organisation %q", got, p.Dev.Email)
	}
	if got := textOf(t, b, "viewer-org"); got != "in "+p.Dev.Email {
		t.Fatalf("header says %q", got)
	}
	do(t, b, "open the organisation's keys",
		chromedp.Click(tid("nav-app-keys")),
		chromedp.WaitVisible(tid("my-key-prefix")),
	)
	if got := textOf(t, b, "my-key-prefix"); got != shared.Prefix+"…" {
		t.Fatalf("the new member sees key %q, want the organisation's %q", got, shared.Prefix)
	}
}
