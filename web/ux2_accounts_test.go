package web_test

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/audit"
	"github.com/sluicehq/sluice/internal/users"
)

// TestOperatorRemoveAndDemote: the last operator stays; another operator can
// be made a developer or removed, audited; one's own account only with
// confirmation, which signs one out of the dashboard.
func TestOperatorRemoveAndDemote(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	op := e.signedIn(operatorEmail)
	self := "/admin/operators/" + strconv.FormatInt(e.operator.ID, 10)

	t.Run("ErrLastOperator", func(t *testing.T) {
		for _, action := range []string{"remove", "demote"} {
			res := op.post(self+"/"+action, url.Values{"confirm_self": {"1"}}, nil)
			if res.StatusCode != http.StatusConflict || !strings.Contains(text(res.doc(t), "operator-refused"), "last operator") {
				t.Errorf("%s the last operator: status %d, refusal %q", action, res.StatusCode, text(res.doc(t), "operator-refused"))
			}
		}
		if u, err := e.users.ByID(ctx, e.operator.ID); err != nil || u.Role != users.RoleOperator {
			t.Fatalf("the last operator is now %+v, %v", u, err)
		}
	})

	second, err := e.users.Create(ctx, users.NewUser{Email: "second@example.com", Password: testPassword, Role: users.RoleOperator})
	if err != nil {
		t.Fatal(err)
	}
	third, err := e.users.Create(ctx, users.NewUser{Email: "third@example.com", Password: testPassword, Role: users.RoleOperator})
	if err != nil {
		t.Fatal(err)
	}
	secondClient := e.signedIn("second@example.com")

	t.Run("ErrSelfWithoutConfirmation", func(t *testing.T) {
		res := op.post(self+"/remove", url.Values{}, nil)
		if res.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(text(res.doc(t), "operator-refused"), "your own account") {
			t.Fatalf("remove self unconfirmed: status %d, %q", res.StatusCode, text(res.doc(t), "operator-refused"))
		}
		if _, err := e.users.ByID(ctx, e.operator.ID); err != nil {
			t.Fatalf("removed without confirmation: %v", err)
		}
	})

	t.Run("DemoteAnother", func(t *testing.T) {
		res := op.post("/admin/operators/"+strconv.FormatInt(second.ID, 10)+"/demote", url.Values{}, nil)
		if res.StatusCode != http.StatusOK || !strings.Contains(text(res.doc(t), "operator-done"), "second@example.com is now a developer") {
			t.Fatalf("demote: status %d, %q", res.StatusCode, text(res.doc(t), "operator-done"))
		}
		if u, _ := e.users.ByID(ctx, second.ID); u.Role != users.RoleDeveloper {
			t.Errorf("demoted operator has role %q", u.Role)
		}
		if res := secondClient.get("/admin/operators", nil); res.StatusCode != http.StatusForbidden {
			t.Errorf("demoted operator's open session reaches the dashboard: status %d", res.StatusCode)
		}
		es, err := audit.List(ctx, e.pool, audit.Filter{Limit: 1})
		if err != nil || len(es) != 1 || es[0].Action != "user.demote" || es[0].ObjectID != strconv.FormatInt(second.ID, 10) {
			t.Errorf("audit = %+v, %v", es, err)
		}
	})

	t.Run("ErrDeveloperIsNoOperator", func(t *testing.T) {
		if res := op.post("/admin/operators/"+strconv.FormatInt(e.dev.ID, 10)+"/remove", url.Values{}, nil); res.StatusCode != http.StatusNotFound {
			t.Errorf("remove a developer as an operator: status %d, want 404", res.StatusCode)
		}
		if _, err := e.users.ByID(ctx, e.dev.ID); err != nil {
			t.Errorf("developer gone: %v", err)
		}
	})

	t.Run("RemoveSelfConfirmed", func(t *testing.T) {
		res := op.post(self+"/remove", url.Values{"confirm_self": {"1"}}, nil)
		if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/signin" {
			t.Fatalf("remove self: status %d, Location %q", res.StatusCode, res.Header.Get("Location"))
		}
		if _, err := e.users.ByID(ctx, e.operator.ID); err == nil {
			t.Error("the account is still there")
		}
		es, _ := audit.List(ctx, e.pool, audit.Filter{Limit: 1})
		if len(es) != 1 || es[0].Action != "user.delete" || es[0].After != nil {
			t.Errorf("audit = %+v", es)
		}
		// third is now the only operator.
		thirdClient := e.signedIn("third@example.com")
		res = thirdClient.post("/admin/operators/"+strconv.FormatInt(third.ID, 10)+"/remove", url.Values{"confirm_self": {"1"}}, nil)
		if res.StatusCode != http.StatusConflict {
			t.Errorf("remove the last remaining operator: status %d", res.StatusCode)
		}
	})
}

// TestDisabledDeveloperCannotSignIn: with the right password a disabled
// developer is told the account is disabled (403), never signed in; a
// session opened before the disable stops working; enabling restores
// sign-in. A wrong password still says only "wrong email or password".
func TestDisabledDeveloperCannotSignIn(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	before := e.signedIn(developerEmail)
	if _, err := e.users.SetDisabled(ctx, e.dev.ID, true); err != nil {
		t.Fatal(err)
	}
	c := e.anonymous()
	res := c.post("/signin", url.Values{"email": {developerEmail}, "password": {testPassword}}, nil)
	if res.StatusCode != http.StatusForbidden || !strings.Contains(res.body, "This account is disabled") {
		t.Fatalf("disabled sign-in: status %d, body has the reason: %v", res.StatusCode, strings.Contains(res.body, "disabled"))
	}
	if res := c.get("/app", nil); res.StatusCode != http.StatusSeeOther {
		t.Errorf("after a refused sign-in /app answers %d, want a redirect to sign in", res.StatusCode)
	}
	if res := before.get("/app", nil); res.StatusCode != http.StatusSeeOther {
		t.Errorf("a session from before the disable still reaches /app: status %d", res.StatusCode)
	}
	res = c.post("/signin", url.Values{"email": {developerEmail}, "password": {"not the password"}}, nil)
	if res.StatusCode != http.StatusUnauthorized || strings.Contains(res.body, "disabled") {
		t.Errorf("wrong password on a disabled account: status %d, mentions disabled %v", res.StatusCode, strings.Contains(res.body, "disabled"))
	}
	if _, err := e.users.SetDisabled(ctx, e.dev.ID, false); err != nil {
		t.Fatal(err)
	}
	e.signedIn(developerEmail)
}
