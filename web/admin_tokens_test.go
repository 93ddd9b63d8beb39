package web_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/optokens"
)

// TestOperatorTokens creates, lists and revokes an admin API token from the
// dashboard: the secret is shown once and works, the list shows when it was
// used, a revoked token stops working, and both changes are audited.
func TestOperatorTokens(t *testing.T) {
	e := newEnv(t)
	c := e.signedIn(operatorEmail)
	ctx := context.Background()
	store := optokens.NewStore(e.pool, "")

	res := c.post("/admin/tokens", url.Values{"name": {"  "}}, nil)
	if res.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("blank name: status %d, want 422", res.StatusCode)
	}
	if got := fieldErrorsOf(res.doc(t))["name"]; !strings.Contains(got, "1 to 100 characters") {
		t.Errorf("blank name: field error %q", got)
	}

	res = c.post("/admin/tokens", url.Values{"name": {"ci deploy"}}, nil)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("create: status %d", res.StatusCode)
	}
	if cc := res.Header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("page with the secret has Cache-Control %q", cc)
	}
	d := res.doc(t)
	secret, _ := d.Find(`[data-testid="secret"]`).Attr("value")
	if !strings.HasPrefix(secret, optokens.SecretPrefix) {
		t.Fatalf("secret %q", secret)
	}
	p, err := store.Authenticate(ctx, secret)
	if err != nil || p.UserID != e.operator.ID {
		t.Fatalf("the shown secret: %+v %v, want the signed-in operator", p, err)
	}

	res = c.get("/admin/tokens", nil)
	d = res.doc(t)
	if strings.Contains(res.body, secret) || count(d, "secret") != 0 {
		t.Error("the list shows the secret again")
	}
	row := d.Find(`[data-testid="token-row"]`)
	if row.Length() != 1 {
		t.Fatalf("%d rows, want 1", row.Length())
	}
	id, _ := row.Attr("data-token")
	cell := func(testID string) string {
		return strings.TrimSpace(row.Find(`[data-testid="` + testID + `"]`).Text())
	}
	if cell("token-name") != "ci deploy" || cell("token-owner") != operatorEmail || cell("token-state") != "active" ||
		cell("token-created") == "—" || cell("token-last-used") == "—" {
		t.Errorf("row: name %q owner %q state %q created %q last used %q", cell("token-name"), cell("token-owner"),
			cell("token-state"), cell("token-created"), cell("token-last-used"))
	}

	res = c.post("/admin/tokens/"+id+"/revoke", nil, nil)
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("revoke: status %d", res.StatusCode)
	}
	if _, err := store.Authenticate(ctx, secret); !errors.Is(err, optokens.ErrInvalidToken) {
		t.Errorf("revoked token authenticates: %v", err)
	}
	d = c.get("/admin/tokens", nil).doc(t)
	if st := text(d, "token-state"); !strings.HasPrefix(st, "revoked ") || count(d, "token-revoke") != 0 {
		t.Errorf("after revoke: state %q, %d revoke buttons", st, count(d, "token-revoke"))
	}
	if res := c.post("/admin/tokens/"+id+"/revoke", nil, nil); res.StatusCode != http.StatusSeeOther {
		t.Errorf("second revoke: status %d, want the same redirect", res.StatusCode)
	}

	actor := fmt.Sprintf("user:%d", e.operator.ID)
	for action, want := range map[string]int{"token.create": 1, "token.revoke": 1} {
		var n int
		if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE action = $1 AND actor = $2 AND object_id = $3`, action, actor, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != want {
			t.Errorf("%d %s entries by %s, want %d", n, action, actor, want)
		}
	}
	var leaked int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE after::text LIKE '%' || $1 || '%'`, secret).Scan(&leaked); err != nil || leaked != 0 {
		t.Errorf("audit entries holding the secret: %d %v", leaked, err)
	}

	for _, path := range []string{"/admin/tokens/999999/revoke", "/admin/tokens/x/revoke"} {
		if res := c.post(path, nil, nil); res.StatusCode != http.StatusNotFound {
			t.Errorf("POST %s: status %d, want 404", path, res.StatusCode)
		}
	}
	dev := e.signedIn(developerEmail)
	if res := dev.get("/admin/tokens", nil); res.StatusCode != http.StatusForbidden {
		t.Errorf("developer GET: status %d, want 403", res.StatusCode)
	}
	if res := dev.post("/admin/tokens", url.Values{"name": {"mine"}}, nil); res.StatusCode != http.StatusForbidden {
		t.Errorf("developer POST: status %d, want 403", res.StatusCode)
	}
}
