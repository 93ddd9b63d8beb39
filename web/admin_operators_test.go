package web_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestOperatorInviteAndResetLinks invites a second operator, who sets a
// password through the one-time link and reaches the dashboard, and resets
// a developer's password through a link an operator made: each link works
// once, the reset signs the developer out, and everything is audited.
func TestOperatorInviteAndResetLinks(t *testing.T) {
	e := newEnv(t)
	op := e.signedIn(operatorEmail)
	ctx := context.Background()
	linkOf := func(res response) string {
		t.Helper()
		link, _ := res.doc(t).Find(`[data-testid="reset-link"]`).Attr("value")
		u, err := url.Parse(link)
		if err != nil || !strings.HasPrefix(u.Path, "/reset/") {
			t.Fatalf("link %q", link)
		}
		return u.Path
	}

	for _, tt := range []struct{ email, field, want string }{
		{"not-an-email", "email", ""},
		{developerEmail, "email", "already has an account"},
	} {
		res := op.post("/admin/operators", url.Values{"email": {tt.email}}, nil)
		if res.StatusCode != http.StatusUnprocessableEntity {
			t.Errorf("invite %q: status %d, want 422", tt.email, res.StatusCode)
			continue
		}
		if got := fieldErrorsOf(res.doc(t))[tt.field]; got == "" || !strings.Contains(got, tt.want) {
			t.Errorf("invite %q: %s error %q", tt.email, tt.field, got)
		}
	}

	res := op.post("/admin/operators", url.Values{"email": {"second@example.com"}}, nil)
	if res.StatusCode != http.StatusCreated || res.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("invite: status %d, Cache-Control %q", res.StatusCode, res.Header.Get("Cache-Control"))
	}
	invite := linkOf(res)
	if n := count(res.doc(t), "operator-row"); n != 2 {
		t.Errorf("%d operators listed, want 2", n)
	}
	if strings.Contains(op.get("/admin/operators", nil).body, invite) {
		t.Error("the list shows the link again")
	}

	second := e.anonymous()
	if res := second.get(invite, nil); res.StatusCode != http.StatusOK || count(res.doc(t), "reset-password-form") != 1 {
		t.Fatalf("open invite: status %d", res.StatusCode)
	}
	if res := second.post(invite, url.Values{"password": {"short"}}, nil); res.StatusCode != http.StatusUnprocessableEntity || fieldErrorsOf(res.doc(t))["password"] == "" {
		t.Fatalf("short password: status %d", res.StatusCode)
	}
	if res := second.post(invite, url.Values{"password": {"the second operator's passphrase"}}, nil); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("set password: status %d", res.StatusCode)
	}
	if res := second.post(invite, url.Values{"password": {"another operator passphrase"}}, nil); res.StatusCode != http.StatusNotFound || count(res.doc(t), "reset-invalid") != 1 {
		t.Errorf("second use of the link: status %d, want 404", res.StatusCode)
	}
	if res := second.post("/signin", url.Values{"email": {"second@example.com"}, "password": {"the second operator's passphrase"}}, nil); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("second operator signs in: status %d", res.StatusCode)
	}
	if res := second.get("/admin/operators", nil); res.StatusCode != http.StatusOK {
		t.Errorf("second operator's dashboard: status %d", res.StatusCode)
	}

	dev := e.signedIn(developerEmail)
	if res := dev.get("/admin/operators", nil); res.StatusCode != http.StatusForbidden {
		t.Errorf("developer sees operators: status %d", res.StatusCode)
	}
	if res := op.post("/admin/operators/reset-link", url.Values{"reset_email": {"nobody@example.com"}}, nil); res.StatusCode != http.StatusUnprocessableEntity ||
		fieldErrorsOf(res.doc(t))["reset_email"] == "" {
		t.Errorf("link for an unknown email: status %d", res.StatusCode)
	}
	res = op.post("/admin/operators/reset-link", url.Values{"reset_email": {strings.ToUpper(developerEmail)}}, nil)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("reset link: status %d", res.StatusCode)
	}
	reset := linkOf(res)
	if res := e.anonymous().post(reset, url.Values{"password": {"the developer's new passphrase"}}, nil); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("developer reset: status %d", res.StatusCode)
	}
	if res := dev.get("/app", nil); res.StatusCode != http.StatusSeeOther {
		t.Errorf("developer's old session after the reset: status %d, want a redirect to sign in", res.StatusCode)
	}
	if _, err := e.users.Authenticate(ctx, developerEmail, "the developer's new passphrase"); err != nil {
		t.Errorf("new password: %v", err)
	}
	if res := e.anonymous().get("/reset/not-a-real-token", nil); res.StatusCode != http.StatusNotFound {
		t.Errorf("made-up link: status %d, want 404", res.StatusCode)
	}

	var created, links, resetsDone int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE action = 'user.create' AND actor = $1 AND after->>'role' = 'operator'),
		count(*) FILTER (WHERE action = 'user.reset_link' AND actor = $1),
		count(*) FILTER (WHERE action = 'user.reset_password') FROM audit_log`, fmt.Sprintf("user:%d", e.operator.ID)).Scan(&created, &links, &resetsDone); err != nil {
		t.Fatal(err)
	}
	if created != 1 || links != 2 || resetsDone != 2 {
		t.Errorf("audit: %d operators created, %d links by the operator, %d resets; want 1, 2 and 2", created, links, resetsDone)
	}
}
