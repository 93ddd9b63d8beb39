package web_test

import (
	"net/http"
	"net/url"
	"testing"
)

// cookieOf returns the session cookie the client's jar holds.
func cookieOf(t *testing.T, c *client) *http.Cookie {
	t.Helper()
	u, _ := url.Parse(c.e.srv.URL)
	for _, ck := range c.http.Jar.Cookies(u) {
		if ck.Name == "sluice_session" {
			return ck
		}
	}
	t.Fatal("no session cookie in the jar")
	return nil
}

// withCookie is a fresh client presenting a copy of a session cookie, as
// someone who copied it would.
func (e *env) withCookie(ck *http.Cookie) *client {
	c := e.anonymous()
	u, _ := url.Parse(e.srv.URL)
	c.http.Jar.SetCookies(u, []*http.Cookie{{Name: ck.Name, Value: ck.Value, Path: "/"}})
	return c
}

func signedInAt(t *testing.T, c *client, path string) bool {
	t.Helper()
	res := c.get(path, nil)
	switch res.StatusCode {
	case http.StatusOK:
		return true
	case http.StatusSeeOther:
		return false
	}
	t.Fatalf("GET %s: status %d", path, res.StatusCode)
	return false
}

func TestSignOutEndsACopiedCookie(t *testing.T) {
	e := newEnv(t)
	c := e.signedIn(operatorEmail)
	copied := e.withCookie(cookieOf(t, c))
	if !signedInAt(t, copied, "/admin/plans") {
		t.Fatal("the copied cookie does not work while signed in")
	}
	if res := c.post("/signout", nil, nil); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign out: status %d", res.StatusCode)
	}
	if signedInAt(t, copied, "/admin/plans") {
		t.Error("a cookie copied before sign-out still works after it")
	}
}

func TestSignOutEverywhere(t *testing.T) {
	e := newEnv(t)
	laptop, phone := e.signedIn(developerEmail), e.signedIn(developerEmail)
	other := e.signedIn(operatorEmail)
	res := phone.post("/signout/everywhere", nil, nil)
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/signin" {
		t.Fatalf("sign out everywhere: status %d Location %q", res.StatusCode, res.Header.Get("Location"))
	}
	if signedInAt(t, laptop, "/app/keys") || signedInAt(t, phone, "/app/keys") {
		t.Error("a session of the account survived sign out everywhere")
	}
	if !signedInAt(t, other, "/admin/plans") {
		t.Error("another account's session was ended")
	}
	if res := e.anonymous().post("/signout/everywhere", nil, nil); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("signed out: status %d, want 401", res.StatusCode)
	}
}

func TestPasswordChangeEndsOtherSessions(t *testing.T) {
	e := newEnv(t)
	here, elsewhere := e.signedIn(developerEmail), e.signedIn(developerEmail)
	before := cookieOf(t, here)
	change := func(current, next string) response {
		return here.post("/account/password", url.Values{"current_password": {current}, "new_password": {next}}, nil)
	}
	t.Run("WrongCurrentPassword", func(t *testing.T) {
		res := change("not it at all", "a brand new passphrase")
		if res.StatusCode != http.StatusUnprocessableEntity || text(res.doc(t), "error-current_password") == "" {
			t.Errorf("status %d, error %q", res.StatusCode, text(res.doc(t), "error-current_password"))
		}
	})
	t.Run("WeakNewPassword", func(t *testing.T) {
		res := change(testPassword, "password1234")
		if res.StatusCode != http.StatusUnprocessableEntity || text(res.doc(t), "error-new_password") == "" {
			t.Errorf("status %d, error %q", res.StatusCode, text(res.doc(t), "error-new_password"))
		}
		if !signedInAt(t, elsewhere, "/app/keys") {
			t.Error("a refused change ended other sessions")
		}
	})
	t.Run("Changed", func(t *testing.T) {
		res := change(testPassword, "a brand new passphrase")
		if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/account?changed=password" {
			t.Fatalf("status %d Location %q", res.StatusCode, res.Header.Get("Location"))
		}
		if signedInAt(t, elsewhere, "/app/keys") {
			t.Error("another session survived the password change")
		}
		if signedInAt(t, e.withCookie(before), "/app/keys") {
			t.Error("this session's identifier from before the change still works")
		}
		if !signedInAt(t, here, "/app/keys") {
			t.Error("the session that changed the password was signed out")
		}
		if text(here.get("/account?changed=password", nil).doc(t), "account-notice") == "" {
			t.Error("no confirmation")
		}
		if res := e.anonymous().post("/signin", url.Values{"email": {developerEmail}, "password": {testPassword}}, nil); res.StatusCode != http.StatusUnauthorized {
			t.Errorf("old password: status %d, want 401", res.StatusCode)
		}
		if res := e.anonymous().post("/signin", url.Values{"email": {developerEmail}, "password": {"a brand new passphrase"}}, nil); res.StatusCode != http.StatusSeeOther {
			t.Errorf("new password: status %d, want 303", res.StatusCode)
		}
	})
}

func TestSignInEndsThePreviousSessionID(t *testing.T) {
	e := newEnv(t)
	c := e.signedIn(developerEmail)
	before := cookieOf(t, c)
	if res := c.post("/signin", url.Values{"email": {developerEmail}, "password": {testPassword}}, nil); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("second sign-in: status %d", res.StatusCode)
	}
	if cookieOf(t, c).Value == before.Value {
		t.Fatal("sign-in kept the session identifier")
	}
	if signedInAt(t, e.withCookie(before), "/app/keys") {
		t.Error("the identifier from before sign-in still works")
	}
}

func TestRoleChangeRenewsTheSessionID(t *testing.T) {
	e := newEnv(t)
	c := e.signedIn(developerEmail)
	before := cookieOf(t, c)
	if _, err := e.pool.Exec(t.Context(), `UPDATE users SET role = 'operator' WHERE id = $1`, e.dev.ID); err != nil {
		t.Fatal(err)
	}
	if !signedInAt(t, c, "/admin/plans") {
		t.Fatal("promoted developer cannot reach /admin")
	}
	if cookieOf(t, c).Value == before.Value {
		t.Error("the role changed and the session identifier did not")
	}
	if signedInAt(t, e.withCookie(before), "/admin/plans") {
		t.Error("the identifier from before the role change still works")
	}
}
