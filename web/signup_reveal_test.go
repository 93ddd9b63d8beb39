package web_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/users"
)

// TestSignUpRevealsNothing: a sign-up with a registered email gets the
// answer a new email gets (status, where it leads, cookies, the page it
// leads to), and changes nothing of the registered account (issue 30,
// item 10). Without mail, the new address's account is made and no one is
// signed in by the answer.
func TestSignUpRevealsNothing(t *testing.T) {
	e := newEnv(t)
	e.defaultPlan()
	ctx := context.Background()

	signUp := func(email, ip string) (response, *client) {
		c := e.anonymous()
		return c.post("/signup", url.Values{"email": {email}, "password": {"another long passphrase"}}, fromIP(ip)), c
	}
	fresh, freshClient := signUp("fresh@example.com", "198.51.100.1")
	// The registered address in another letter case: the same account.
	taken, takenClient := signUp(strings.ToUpper(developerEmail), "198.51.100.2")

	if fresh.StatusCode != taken.StatusCode || fresh.Header.Get("Location") != taken.Header.Get("Location") {
		t.Errorf("new email: %d to %q; registered email: %d to %q; want the same answer",
			fresh.StatusCode, fresh.Header.Get("Location"), taken.StatusCode, taken.Header.Get("Location"))
	}
	if fresh.StatusCode != http.StatusSeeOther {
		t.Errorf("status %d, want 303 (to sign in)", fresh.StatusCode)
	}
	if a, b := len(fresh.Cookies()), len(taken.Cookies()); a != b || a != 0 {
		t.Errorf("cookies set: %d for the new email, %d for the registered one; want none for either", a, b)
	}
	if a, b := fresh.body, taken.body; a != b {
		t.Errorf("bodies differ:\n%s\n---\n%s", a, b)
	}
	if loc := fresh.Header.Get("Location"); loc != "" {
		a := freshClient.get(loc, nil)
		b := takenClient.get(loc, nil)
		if a.StatusCode != b.StatusCode || a.body != b.body {
			t.Errorf("the pages the answers lead to differ: %d and %d", a.StatusCode, b.StatusCode)
		}
		if !strings.Contains(text(a.doc(t), "signup-done"), "sign in") {
			t.Errorf("the page after sign-up says %q, want it to say to sign in", text(a.doc(t), "signup-done"))
		}
	}

	if _, err := e.users.ByEmail(ctx, "fresh@example.com"); err != nil {
		t.Errorf("the new address has no account: %v", err)
	}
	if _, err := e.users.Authenticate(ctx, developerEmail, testPassword); err != nil {
		t.Errorf("the registered account's password changed: %v", err)
	}
	list, err := e.users.List(ctx, users.ListFilter{EmailContains: developerEmail})
	if err != nil || len(list) != 1 {
		t.Errorf("%d accounts match the registered email (%v), want 1", len(list), err)
	}
}
