package web_test

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/mail"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/users"
	"github.com/sluicehq/sluice/web"
)

// publicURL is the base of the links in the tests' emails: a host the test
// server does not answer to, so a link taken from the request's Host would
// show.
const publicURL = "http://portal.test"

// newMailEnv is newEnv with the portal sending email to a real SMTP server
// started for the test.
func newMailEnv(t *testing.T) (*env, *testenv.SMTPServer) {
	t.Helper()
	srv := testenv.SMTP(t, testenv.SMTPOptions{User: "sluice", Pass: "smtp secret"})
	sender, err := mail.New(srv.URL(), "Sluice <noreply@portal.test>", mail.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvWith(t, func(d *web.Deps) { d.Mailer, d.PublicURL = sender, publicURL })
	e.defaultPlan()
	return e, srv
}

// mailTo is the one message the server received for to.
func mailTo(t *testing.T, got []testenv.Mail, to string) testenv.Mail {
	t.Helper()
	var found []testenv.Mail
	for _, m := range got {
		if len(m.To) == 1 && strings.EqualFold(m.To[0], to) {
			found = append(found, m)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d messages to %s, want 1", len(found), to)
	}
	return found[0]
}

// linkIn is the path of the link in m under publicURL+prefix.
func linkIn(t *testing.T, m testenv.Mail, prefix string) string {
	t.Helper()
	found := regexp.MustCompile(regexp.QuoteMeta(publicURL+prefix) + `[A-Za-z0-9_-]+`).FindString(m.Body())
	if found == "" {
		t.Fatalf("no %s%s... link in:\n%s", publicURL, prefix, m.Body())
	}
	return strings.TrimPrefix(found, publicURL)
}

// TestSignUpConfirmedByEmail: with email, a sign-up makes no account until
// the link mailed to the address is opened with the chosen password; a
// registered address gets the same answer, and its owner an email saying
// so (issue 30 item 10, issue 37 item 2).
func TestSignUpConfirmedByEmail(t *testing.T) {
	e, smtp := newMailEnv(t)
	ctx := context.Background()
	const fresh, chosen = "fresh@example.com", "another long passphrase"

	if note := text(e.anonymous().get("/signup", nil).doc(t), "signup-mail-note"); !strings.Contains(note, "email you a link") {
		t.Errorf("sign-up page says %q, want that a link will be emailed", note)
	}
	signUp := func(email, ip string) (response, *client) {
		c := e.anonymous()
		return c.post("/signup", url.Values{"email": {email}, "password": {chosen}}, fromIP(ip)), c
	}
	a, ac := signUp(fresh, "198.51.100.1")
	b, bc := signUp(strings.ToUpper(developerEmail), "198.51.100.2")
	if a.StatusCode != http.StatusSeeOther || a.Header.Get("Location") != "/signup/sent" {
		t.Fatalf("new address: %d to %q, want 303 to /signup/sent", a.StatusCode, a.Header.Get("Location"))
	}
	if b.StatusCode != a.StatusCode || b.Header.Get("Location") != a.Header.Get("Location") || len(a.Cookies())+len(b.Cookies()) != 0 || a.body != b.body {
		t.Errorf("registered address: %d to %q (%d cookies); want the new address's answer", b.StatusCode, b.Header.Get("Location"), len(b.Cookies()))
	}
	pa, pb := ac.get("/signup/sent", nil), bc.get("/signup/sent", nil)
	if pa.StatusCode != http.StatusOK || pa.body != pb.body || !strings.Contains(text(pa.doc(t), "signup-sent"), "Open the link") {
		t.Errorf("the pages after sign-up differ or do not say to open the link (%d, %d)", pa.StatusCode, pb.StatusCode)
	}

	got := smtp.WaitFor(t, 2)
	owner := mailTo(t, got, strings.ToUpper(developerEmail))
	if !strings.Contains(owner.Body(), "already has an account") || strings.Contains(owner.Body(), "/signup/confirm/") ||
		!strings.Contains(owner.Body(), publicURL+"/password/forgot") {
		t.Errorf("the registered owner's email:\n%s", owner.Body())
	}
	if _, err := e.users.Authenticate(ctx, developerEmail, testPassword); err != nil {
		t.Errorf("the registered account changed: %v", err)
	}
	confirm := mailTo(t, got, fresh)
	if !confirm.Authed || confirm.Header("Subject") != "Confirm your Sluice developer account" {
		t.Errorf("confirmation: authed %v, subject %q", confirm.Authed, confirm.Header("Subject"))
	}
	link := linkIn(t, confirm, "/signup/confirm/")

	// Before the link is opened there is no account: sign-in says what it
	// says for any unknown email.
	if _, err := e.users.ByEmail(ctx, fresh); err == nil {
		t.Fatal("an account exists before the link was opened")
	}
	if res := e.anonymous().post("/signin", url.Values{"email": {fresh}, "password": {chosen}}, fromIP("198.51.100.3")); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("sign-in before confirmation: status %d, want 401 (wrong email or password)", res.StatusCode)
	}

	c := e.anonymous()
	form := c.get(link, nil)
	if form.StatusCode != http.StatusOK || text(form.doc(t), "confirm-email") != fresh || form.Header.Get("Referrer-Policy") != "no-referrer" {
		t.Fatalf("the link's page: %d, email %q, Referrer-Policy %q", form.StatusCode, text(form.doc(t), "confirm-email"), form.Header.Get("Referrer-Policy"))
	}
	if res := c.post(link, url.Values{"password": {"not the chosen one"}}, nil); res.StatusCode != http.StatusUnprocessableEntity || text(res.doc(t), "error-password") == "" {
		t.Errorf("another password: status %d, want 422 naming the password", res.StatusCode)
	}
	res := c.post(link, url.Values{"password": {chosen}}, nil)
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/app/keys" {
		t.Fatalf("confirm: %d to %q, want 303 to /app/keys", res.StatusCode, res.Header.Get("Location"))
	}
	if res := c.get("/app/keys", nil); res.StatusCode != http.StatusOK {
		t.Errorf("/app/keys after confirming: %d", res.StatusCode)
	}
	u, err := e.users.ByEmail(ctx, fresh)
	if err != nil || u.Role != users.RoleDeveloper || u.PlanID == nil {
		t.Errorf("made %+v (%v), want a developer on a plan", u, err)
	}
	if res := e.anonymous().get(link, nil); res.StatusCode != http.StatusNotFound || count(res.doc(t), "confirm-invalid") != 1 {
		t.Errorf("the used link: status %d, want 404 and the invalid page", res.StatusCode)
	}
}

// TestForgotPassword: /password/forgot answers the same for a registered
// and an unknown email, mails a single-use link only to the registered
// one, built on the public URL whatever the Host header says.
func TestForgotPassword(t *testing.T) {
	e, smtp := newMailEnv(t)
	ctx := context.Background()

	page := e.anonymous().get("/password/forgot", nil)
	if page.StatusCode != http.StatusOK || count(page.doc(t), "forgot-form") != 1 {
		t.Fatalf("forgot page: %d", page.StatusCode)
	}
	ask := func(email, ip, host string) response {
		c := e.anonymous()
		req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/password/forgot", strings.NewReader(url.Values{"email": {email}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("X-Forwarded-For", ip)
		if host != "" {
			req.Host = host
		}
		return c.do(req)
	}
	known := ask(developerEmail, "198.51.100.1", "evil.example")
	unknown := ask("nobody@example.com", "198.51.100.2", "")
	for _, res := range []response{known, unknown} {
		if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/password/forgot?sent=1" || len(res.Cookies()) != 0 {
			t.Errorf("answer %d to %q, want 303 to /password/forgot?sent=1 without cookies", res.StatusCode, res.Header.Get("Location"))
		}
	}
	if known.body != unknown.body {
		t.Error("the answers' bodies differ")
	}
	if s := text(e.anonymous().get("/password/forgot?sent=1", nil).doc(t), "forgot-sent"); !strings.Contains(s, "If an account has this email") {
		t.Errorf("sent page says %q", s)
	}
	got := smtp.WaitFor(t, 1)
	m := mailTo(t, got, developerEmail)
	if strings.Contains(m.Body(), "evil.example") {
		t.Fatalf("the link took its host from the request:\n%s", m.Body())
	}
	link := linkIn(t, m, "/reset/")

	c := e.anonymous()
	if res := c.get(link, nil); res.StatusCode != http.StatusOK || count(res.doc(t), "reset-password-form") != 1 {
		t.Fatalf("the link's page: %d", res.StatusCode)
	}
	if res := c.post(link, url.Values{"password": {"a brand new passphrase"}}, nil); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("set the password through the link: %d", res.StatusCode)
	}
	if _, err := e.users.Authenticate(ctx, developerEmail, "a brand new passphrase"); err != nil {
		t.Errorf("the new password does not work: %v", err)
	}
	if res := c.post(link, url.Values{"password": {"a third passphrase here"}}, nil); res.StatusCode != http.StatusNotFound {
		t.Errorf("the used link: status %d, want 404", res.StatusCode)
	}
	if n := len(smtp.Received()); n != 1 {
		t.Errorf("%d messages sent, want 1 (none to the unknown email)", n)
	}

	t.Run("LimitedPerEmail", func(t *testing.T) {
		var last response
		for i := range 3 {
			last = ask("nobody@example.com", "203.0.113."+string(rune('1'+i)), "")
		}
		if last.StatusCode != http.StatusTooManyRequests || last.Header.Get("Retry-After") == "" {
			t.Errorf("the 4th request for one email: status %d, want 429 with Retry-After", last.StatusCode)
		}
	})
}

// TestWithoutMailThePortalSaysSo: with no SMTP server the forgot-password
// page says to ask an operator and sends nothing, and sign-up says the
// address is not verified.
func TestWithoutMailThePortalSaysSo(t *testing.T) {
	e := newEnv(t)
	e.defaultPlan()
	page := e.anonymous().get("/password/forgot", nil)
	if d := page.doc(t); page.StatusCode != http.StatusOK || !strings.Contains(text(d, "forgot-no-mail"), "Ask an operator") || count(d, "forgot-form") != 0 {
		t.Errorf("forgot page: %d, %q", page.StatusCode, text(d, "forgot-no-mail"))
	}
	if res := e.anonymous().post("/password/forgot", url.Values{"email": {developerEmail}}, nil); res.StatusCode != http.StatusServiceUnavailable || count(res.doc(t), "forgot-no-mail") != 1 {
		t.Errorf("forgot request: %d, want 503 saying to ask an operator", res.StatusCode)
	}
	if note := text(e.anonymous().get("/signup", nil).doc(t), "signup-mail-note"); !strings.Contains(note, "not be verified") {
		t.Errorf("sign-up page says %q, want that the address is not verified", note)
	}
	if count(e.anonymous().get("/signin", nil).doc(t), "forgot-link") != 1 {
		t.Error("the sign-in page has no forgot-password link")
	}
}

// TestAccountEmailFormsRefuseOtherSites: the new forms are state-changing
// routes like any other: a cross-site POST is refused and does nothing.
func TestAccountEmailFormsRefuseOtherSites(t *testing.T) {
	e, smtp := newMailEnv(t)
	cross := http.Header{"Sec-Fetch-Site": {"cross-site"}}
	if res := e.anonymous().post("/password/forgot", url.Values{"email": {developerEmail}}, cross); res.StatusCode != http.StatusForbidden {
		t.Errorf("cross-site forgot: status %d, want 403", res.StatusCode)
	}
	if res := e.anonymous().post("/signup", url.Values{"email": {"fresh@example.com"}, "password": {"another long passphrase"}}, cross); res.StatusCode != http.StatusForbidden {
		t.Errorf("cross-site sign-up: status %d, want 403", res.StatusCode)
	}
	token, _, err := e.users.StartSignup(context.Background(), users.NewUser{Email: "pending@example.com", Password: "another long passphrase"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if res := e.anonymous().post("/signup/confirm/"+token, url.Values{"password": {"another long passphrase"}}, cross); res.StatusCode != http.StatusForbidden || len(res.Cookies()) != 0 {
		t.Errorf("cross-site confirmation: status %d, want 403 and no session", res.StatusCode)
	}
	if _, err := e.users.ByEmail(context.Background(), "pending@example.com"); err == nil {
		t.Error("a cross-site confirmation made the account")
	}
	// The refused requests reached no handler, so none queued a send.
	if n := len(smtp.Received()); n != 0 {
		t.Errorf("%d emails sent, want none", n)
	}
}
