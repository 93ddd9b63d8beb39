package web_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestNamesRefuseReplacementCharacter: browsers send a lone surrogate
// typed or pasted into a form as U+FFFD; a name holding it lost a
// character on the way, and is refused with a field error instead of
// being stored as it came.
func TestNamesRefuseReplacementCharacter(t *testing.T) {
	e := newEnv(t)
	op, dev := e.signedIn(operatorEmail), e.signedIn(developerEmail)
	const lost = "Go\ufffdld"
	for _, tt := range []struct {
		name string
		c    *client
		path string
		form url.Values
	}{
		{"PlanName", op, "/admin/plans", url.Values{"slug": {"gold"}, "name": {lost}}},
		{"KeyName", dev, "/app/keys", url.Values{"name": {lost}}},
		{"ServiceName", op, "/admin/services", url.Values{"slug": {"shop"}, "name": {lost}, "routes": {"GET /items"}}},
		{"OperatorTokenName", op, "/admin/tokens", url.Values{"name": {lost}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res := tt.c.post(tt.path, tt.form, nil)
			if res.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(res.body, "must not contain U+FFFD") {
				t.Fatalf("status %d, want 422 saying U+FFFD is refused", res.StatusCode)
			}
		})
	}
	var n int
	if err := e.pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM plans WHERE slug = 'gold') + (SELECT count(*) FROM services WHERE slug = 'shop')
		+ (SELECT count(*) FROM api_keys WHERE name LIKE 'Go%') + (SELECT count(*) FROM operator_tokens WHERE name LIKE 'Go%')`).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d refused names written (%v)", n, err)
	}
}
