package web_test

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"github.com/sluicehq/sluice/internal/apikeys"
	webviews "github.com/sluicehq/sluice/views"
)

// TestOperatorIssuesRotatesAndExpiresKeys: an operator issues a key to a
// developer and sees its secret once, rotates any key, and sets, moves and
// removes its expiry; each change is refused with the field named when
// wrong.
func TestOperatorIssuesRotatesAndExpiresKeys(t *testing.T) {
	e := newEnv(t)
	e.defaultPlan()
	c := e.signedIn(operatorEmail)
	ctx := context.Background()

	t.Run("issue", func(t *testing.T) {
		day := time.Now().UTC().AddDate(0, 2, 0).Format(time.DateOnly)
		res := c.post("/admin/keys", url.Values{"owner": {developerEmail}, "name": {"partner feed"}, "expires": {day}}, nil)
		if res.StatusCode != http.StatusSeeOther {
			t.Fatalf("status %d, want 303: %s", res.StatusCode, text(res.doc(t), "error-owner"))
		}
		page := res.Header.Get("Location")
		d := c.get(page, nil).doc(t)
		secret, _ := d.Find(`[data-testid="secret"]`).Attr("value")
		if apikeys.Check(secret) != nil {
			t.Fatalf("no secret shown (%q)", secret)
		}
		if again := c.get(page, nil).doc(t); count(again, "secret") != 0 || count(again, "secret-gone") != 1 {
			t.Error("the secret page shows the secret a second time")
		}
		keys, _, err := e.keys.List(ctx, apikeys.Filter{UserID: e.dev.ID, Limit: 10})
		if err != nil || len(keys) != 1 {
			t.Fatalf("developer's keys %v, %v", keys, err)
		}
		k := keys[0]
		if k.Name != "partner feed" || k.Prefix != apikeys.PrefixOf(secret) || expiry(k.ExpiresAt) != "end of "+day {
			t.Errorf("issued key %+v", k)
		}
		if page != "/admin/keys/"+strconv.FormatInt(k.ID, 10)+"/secret" {
			t.Errorf("secret page %q", page)
		}
		// The developer sees it among their keys, secret never.
		mine := e.signedIn(developerEmail).get("/app/keys", nil)
		if !strings.Contains(mine.body, "partner feed") || strings.Contains(mine.body, secret) {
			t.Error("the developer's list does not show the issued key, or shows its secret")
		}
	})

	for _, tt := range []struct {
		name  string
		form  url.Values
		field string
		want  string
	}{
		{"unknown developer", url.Values{"owner": {"ghost@example.com"}, "name": {"x"}}, "error-owner", "no developer has this email"},
		{"an operator is not a developer", url.Values{"owner": {operatorEmail}, "name": {"x"}}, "error-owner", "is an operator; keys are issued to developers"},
		{"name required", url.Values{"owner": {developerEmail}, "name": {""}}, "error-name", "must be 1 to 100 characters"},
		{"expiry must be a date", url.Values{"owner": {developerEmail}, "name": {"x"}, "expires": {"soon"}}, "error-expires_at", "must be a date such as 2027-01-31"},
		{"expiry at most ten years ahead", url.Values{"owner": {developerEmail}, "name": {"x"}, "expires": {"9999-12-31"}}, "error-expires_at", "must be at most 10 years from now; leave it empty for a key that does not expire"},
	} {
		t.Run("issue refused: "+tt.name, func(t *testing.T) {
			res := c.post("/admin/keys", tt.form, nil)
			if res.StatusCode != http.StatusUnprocessableEntity {
				t.Fatalf("status %d, want 422", res.StatusCode)
			}
			d := res.doc(t)
			if got := text(d, tt.field); got != tt.want {
				t.Errorf("%s = %q, want %q", tt.field, got, tt.want)
			}
			if v, _ := d.Find(`[data-testid="issue-owner"]`).Attr("value"); v != tt.form.Get("owner") {
				t.Errorf("the form lost the typed email: %q", v)
			}
		})
	}

	t.Run("rotate", func(t *testing.T) {
		k, old := e.createKey(e.dev.ID, "to rotate")
		path := "/admin/keys/" + strconv.FormatInt(k.ID, 10)
		res := c.post(path+"/rotate", url.Values{"grace_seconds": {"300"}}, nil)
		if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != path+"/secret" {
			t.Fatalf("status %d to %q", res.StatusCode, res.Header.Get("Location"))
		}
		d := c.get(path+"/secret", nil).doc(t)
		secret, _ := d.Find(`[data-testid="secret"]`).Attr("value")
		if secret == old || apikeys.Check(secret) != nil || !strings.Contains(text(d, "rotate-grace-note"), "5m") {
			t.Fatalf("rotation shows secret %q, note %q", secret, text(d, "rotate-grace-note"))
		}
		cur, _ := e.keys.Get(ctx, k.ID)
		if cur.Prefix != apikeys.PrefixOf(secret) || cur.PreviousSecretUntil == nil {
			t.Errorf("after rotation: prefix %q, previous secret until %v", cur.Prefix, cur.PreviousSecretUntil)
		}
		if res := c.post(path+"/rotate", url.Values{"grace_seconds": {"7"}}, nil); res.StatusCode != http.StatusBadRequest {
			t.Errorf("a grace not offered: status %d, want 400", res.StatusCode)
		}
	})

	t.Run("expiry set, moved, removed", func(t *testing.T) {
		k, _ := e.createKey(e.dev.ID, "expiring")
		path := "/admin/keys/" + strconv.FormatInt(k.ID, 10)
		for _, day := range []string{time.Now().UTC().AddDate(0, 0, 3).Format(time.DateOnly), time.Now().UTC().AddDate(1, 0, 0).Format(time.DateOnly), ""} {
			res := c.post(path+"/expiry", url.Values{"expires": {day}}, nil)
			if res.StatusCode != http.StatusSeeOther {
				t.Fatalf("expiry %q: status %d", day, res.StatusCode)
			}
			cur, _ := e.keys.Get(ctx, k.ID)
			want := "never"
			if day != "" {
				want = "end of " + day
			}
			if got := expiry(cur.ExpiresAt); got != want {
				t.Errorf("after setting %q: expires %q, want %q", day, got, want)
			}
			if got, _ := c.get(path, nil).doc(t).Find(`[data-testid="key-expiry-input"]`).Attr("value"); got != day {
				t.Errorf("the form shows %q after setting %q", got, day)
			}
		}
		for _, tt := range []struct{ typed, want string }{
			{"2020-01-01", "must be in the future"},
			{"31/01/2027", "must be a date such as 2027-01-31"},
			{"9999-12-31", "must be at most 10 years from now; leave it empty for a key that does not expire"},
		} {
			res := c.post(path+"/expiry", url.Values{"expires": {tt.typed}}, nil)
			d := res.doc(t)
			if res.StatusCode != http.StatusUnprocessableEntity || text(d, "error-expires_at") != tt.want {
				t.Errorf("expiry %q: status %d, error %q, want 422 %q", tt.typed, res.StatusCode, text(d, "error-expires_at"), tt.want)
			}
			if got, _ := d.Find(`[data-testid="key-expiry-input"]`).Attr("value"); got != tt.typed {
				t.Errorf("the refused expiry form shows %q, want %q", got, tt.typed)
			}
		}
		var actions int
		if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE action = 'key.expiry' AND object_id = $1`, strconv.FormatInt(k.ID, 10)).Scan(&actions); err != nil || actions != 3 {
			t.Errorf("%d key.expiry audit entries, want 3 (%v)", actions, err)
		}
	})

	t.Run("developers cannot", func(t *testing.T) {
		dev := e.signedIn(developerEmail)
		k, _ := e.createKey(e.dev.ID, "theirs")
		for _, p := range []string{"/admin/keys", "/admin/keys/" + strconv.FormatInt(k.ID, 10) + "/rotate", "/admin/keys/" + strconv.FormatInt(k.ID, 10) + "/expiry"} {
			if res := dev.post(p, url.Values{"owner": {developerEmail}, "name": {"x"}, "grace_seconds": {"0"}}, nil); res.StatusCode != http.StatusForbidden {
				t.Errorf("POST %s as a developer: status %d, want 403", p, res.StatusCode)
			}
		}
	})
}

// expiry renders an expiry as the pages do.
func expiry(t *time.Time) string { return webviews.Expiry(t) }

// TestDeveloperDisable: the developers list disables and re-enables a
// developer, says so, and audits both; operators cannot be disabled.
func TestDeveloperDisable(t *testing.T) {
	e := newEnv(t)
	e.defaultPlan()
	c := e.signedIn(operatorEmail)
	ctx := context.Background()
	path := "/admin/developers/" + strconv.FormatInt(e.dev.ID, 10)
	state := func() string {
		d := c.get("/admin/developers", nil).doc(t)
		return strings.TrimSpace(d.Find(`[data-developer="` + developerEmail + `"] [data-testid="developer-state"]`).Text())
	}
	if got := state(); got != "active" {
		t.Fatalf("state before %q", got)
	}
	res := c.post(path+"/disable", nil, nil)
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("disable: status %d", res.StatusCode)
	}
	if got := state(); !strings.HasPrefix(got, "disabled since ") {
		t.Errorf("state after disable %q", got)
	}
	if msg := text(c.get(res.Header.Get("Location"), nil).doc(t), "saved"); !strings.Contains(msg, "every key of theirs is refused") {
		t.Errorf("message %q", msg)
	}
	if res := c.post(path+"/enable", nil, nil); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("enable: status %d", res.StatusCode)
	}
	if got := state(); got != "active" {
		t.Errorf("state after enable %q", got)
	}
	var actions []string
	rows, err := e.pool.Query(ctx, `SELECT action FROM audit_log WHERE object_type = 'user' AND object_id = $1 ORDER BY id`, strconv.FormatInt(e.dev.ID, 10))
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var a string
		_ = rows.Scan(&a)
		actions = append(actions, a)
	}
	if strings.Join(actions, ",") != "user.disable,user.enable" {
		t.Errorf("audit actions %v", actions)
	}
	if res := c.post("/admin/developers/"+strconv.FormatInt(e.operator.ID, 10)+"/disable", nil, nil); res.StatusCode != http.StatusNotFound {
		t.Errorf("disable an operator: status %d, want 404", res.StatusCode)
	}
	if res := e.signedIn(developerEmail).post(path+"/disable", nil, nil); res.StatusCode != http.StatusForbidden {
		t.Errorf("a developer disabling: status %d, want 403", res.StatusCode)
	}
}

// TestDevelopersListPages: the list shows 50 developers a page with links
// that keep the search; no developer is on two pages or none.
func TestDevelopersListPages(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for i := range 60 {
		if _, err := e.pool.Exec(ctx, `INSERT INTO users (email, password_hash, role) VALUES ($1, 'x', 'developer')`,
			"team"+strconv.Itoa(i)+"@corp.example"); err != nil {
			t.Fatal(err)
		}
	}
	c := e.signedIn(operatorEmail)
	seen := map[string]bool{}
	next := "/admin/developers?q=corp.example"
	pages := 0
	for next != "" {
		d := c.get(next, nil).doc(t)
		pages++
		d.Find(`[data-testid="developer-row"]`).Each(func(_ int, s *goquery.Selection) {
			email, _ := s.Attr("data-developer")
			if seen[email] {
				t.Errorf("%s is on two pages", email)
			}
			seen[email] = true
		})
		href, ok := d.Find(`[data-testid="developers-next"]`).Attr("href")
		if ok && !strings.Contains(href, "q=corp.example") {
			t.Errorf("next link %q loses the search", href)
		}
		next = href
		if pages > 3 {
			t.Fatal("more than 3 pages for 60 developers")
		}
	}
	if pages != 2 || len(seen) != 60 {
		t.Errorf("%d pages, %d developers, want 2 and 60", pages, len(seen))
	}
}
