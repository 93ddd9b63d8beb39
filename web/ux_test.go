package web_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/users"
)

// TestSlashAddressesRedirect: the first-start message and the README print
// /admin/ and /app/; typed with the slash, they reach the page.
func TestSlashAddressesRedirect(t *testing.T) {
	e := newEnv(t)
	c := e.anonymous()
	for _, tt := range []struct{ path, want string }{
		{"/admin/", "/admin"},
		{"/app/", "/app"},
		{"/docs/", "/docs"},
	} {
		t.Run(tt.path, func(t *testing.T) {
			res := c.get(tt.path, nil)
			if res.StatusCode != http.StatusMovedPermanently {
				t.Fatalf("status %d, want 301", res.StatusCode)
			}
			if got := res.Header.Get("Location"); got != tt.want {
				t.Errorf("Location = %q, want %q", got, tt.want)
			}
		})
	}
	t.Run("deeper unknown paths are still 404", func(t *testing.T) {
		if res := c.get("/admin/nothing-here", nil); res.StatusCode != http.StatusNotFound {
			t.Errorf("status %d, want 404", res.StatusCode)
		}
	})
}

// TestDocsUsageLinkFitsTheViewer: the docs page's link to live usage leads
// somewhere the reader may go (an operator has no /app).
func TestDocsUsageLinkFitsTheViewer(t *testing.T) {
	e := newEnv(t)
	e.defaultPlan()
	for _, tt := range []struct{ email, want string }{
		{operatorEmail, "/admin/live"},
		{developerEmail, "/app"},
	} {
		t.Run(tt.email, func(t *testing.T) {
			c := e.signedIn(tt.email)
			d := c.get("/docs", nil).doc(t)
			href, _ := d.Find(`[data-testid="docs-usage-link"]`).Attr("href")
			if href != tt.want {
				t.Fatalf("usage link = %q, want %q", href, tt.want)
			}
			if res := c.get(href, nil); res.StatusCode != http.StatusOK {
				t.Errorf("GET %s as %s: status %d", href, tt.email, res.StatusCode)
			}
		})
	}
}

// TestNewSecretPageSurvivesAReload: the secret page is reached by a redirect,
// so a reload shows it again without issuing another key or showing the
// secret a second time; the same holds after a rotation.
func TestNewSecretPageSurvivesAReload(t *testing.T) {
	e := newEnv(t)
	e.defaultPlan()
	c := e.signedIn(developerEmail)
	countKeys := func() int {
		var n int
		if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM api_keys WHERE user_id = $1`, e.dev.ID).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	t.Run("create", func(t *testing.T) {
		before := countKeys()
		res := c.post("/app/keys", url.Values{"name": {"reloaded"}}, nil)
		if res.StatusCode != http.StatusSeeOther {
			t.Fatalf("status %d, want 303", res.StatusCode)
		}
		page := res.Header.Get("Location")
		first := c.get(page, nil).doc(t)
		secret, _ := first.Find(`[data-testid="secret"]`).Attr("value")
		if apikeys.Check(secret) != nil {
			t.Fatalf("first visit shows no secret (%q)", secret)
		}
		reload := c.get(page, nil)
		if reload.StatusCode != http.StatusOK {
			t.Fatalf("reload: status %d", reload.StatusCode)
		}
		d := reload.doc(t)
		if count(d, "secret") != 0 || strings.Contains(reload.body, secret) {
			t.Error("the reload shows the secret again")
		}
		if count(d, "secret-gone") != 1 {
			t.Error("the reload does not say the secret was shown")
		}
		if got := countKeys(); got != before+1 {
			t.Errorf("%d keys after create and reload, want %d", got, before+1)
		}
	})

	t.Run("rotate", func(t *testing.T) {
		k, _ := e.createKey(e.dev.ID, "rotated twice?")
		res := c.post("/app/keys/"+strconv.FormatInt(k.ID, 10)+"/rotate", url.Values{"grace_seconds": {"0"}}, nil)
		if res.StatusCode != http.StatusSeeOther {
			t.Fatalf("status %d, want 303", res.StatusCode)
		}
		page := res.Header.Get("Location")
		if d := c.get(page, nil).doc(t); count(d, "secret") != 1 || !strings.Contains(text(d, "rotate-grace-note"), "stopped working") {
			t.Fatal("first visit shows no rotated secret and grace note")
		}
		if d := c.get(page, nil).doc(t); count(d, "secret") != 0 || count(d, "secret-gone") != 1 {
			t.Error("the reload shows a secret")
		}
		var secrets int
		if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM api_key_secrets WHERE key_id = $1`, k.ID).Scan(&secrets); err != nil {
			t.Fatal(err)
		}
		if secrets != 2 {
			t.Errorf("%d secrets after one rotation and a reload, want 2", secrets)
		}
	})

	t.Run("another developer's browser cannot open the cookie", func(t *testing.T) {
		other, err := e.users.Create(context.Background(), users.NewUser{Email: "other@example.com", Password: testPassword, Role: users.RoleDeveloper})
		if err != nil {
			t.Fatal(err)
		}
		k, _ := e.createKey(other.ID, "theirs")
		// The victim's page is 404 to everyone else whatever cookie they hold.
		if res := c.get("/app/keys/"+strconv.FormatInt(k.ID, 10)+"/secret", nil); res.StatusCode != http.StatusNotFound {
			t.Errorf("status %d, want 404", res.StatusCode)
		}
	})
}

// TestUnusedBucketsLookUnused: an idle token bucket holds its whole burst and
// an idle leaky bucket has its whole queue free; neither may read as nearly
// spent (it did: used was computed as limit minus remaining), and windows
// still count requests against the limit.
func TestUnusedBucketsLookUnused(t *testing.T) {
	e := newEnv(t)
	p, err := e.plans.Create(context.Background(), "test", plans.PlanInput{
		Slug: "free", Name: "Free", IsPublic: true, IsDefault: true,
		Limits: []plans.LimitInput{
			{Name: "items", Route: "GET /api/items/{id}", Algorithm: "token_bucket", Limit: 60, WindowSeconds: 60, Burst: 50},
			{Name: "reports", Route: "POST /api/reports", Algorithm: "leaky_bucket", Limit: 6, WindowSeconds: 60, Burst: 1},
			{Name: "global", Algorithm: "fixed_window", Limit: 600, WindowSeconds: 3600},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	k, _ := e.createKey(e.dev.ID, "idle")

	gauge := func(row *goquery.Selection, prefix string) (string, string, string) {
		f := func(id string) string {
			return strings.TrimSpace(row.Find(`[data-testid="` + prefix + "-" + id + `"]`).Text())
		}
		return f("used"), f("left"), f("max")
	}
	check := func(t *testing.T, d *goquery.Document, rowSel, prefix string, want map[string][3]string) {
		t.Helper()
		for policy, w := range want {
			row := d.Find(fmt.Sprintf(rowSel, policy))
			if row.Length() != 1 {
				t.Errorf("%s: no row", policy)
				continue
			}
			used, left, of := gauge(row, prefix)
			if [3]string{used, left, of} != w {
				t.Errorf("%s: used %q left %q of %q, want %q", policy, used, left, of, w)
			}
		}
	}

	t.Run("developer, idle", func(t *testing.T) {
		d := e.signedIn(developerEmail).get("/app", nil).doc(t)
		if count(d, "usage-banner-80")+count(d, "usage-banner-100") != 0 {
			t.Error("an unused key shows a usage warning")
		}
		check(t, d, `[data-testid="usage-limit"][data-policy="%s"]`, "usage", map[string][3]string{
			"free-items":   {"", "50", "50"},
			"free-reports": {"", "2", "2"},
			"free-global":  {"0", "", "600"},
		})
	})

	t.Run("developer, after traffic", func(t *testing.T) {
		e.spend(k, p, "GET /api/items/{id}", 45)
		d := e.signedIn(developerEmail).get("/app", nil).doc(t)
		if count(d, "usage-banner-80") != 1 {
			t.Error("45 of a burst of 50 spent shows no 80 % warning")
		}
		check(t, d, `[data-testid="usage-limit"][data-policy="%s"]`, "usage", map[string][3]string{
			"free-items":  {"", "5", "50"},
			"free-global": {"45", "", "600"},
		})
	})

	t.Run("operator's live view", func(t *testing.T) {
		d := e.signedIn(operatorEmail).get("/admin/live?keys="+strconv.FormatInt(k.ID, 10), nil).doc(t)
		check(t, d, `[data-testid="live-limit"][data-limit="%s"]`, "live", map[string][3]string{
			"free-items":   {"", "5", "50"},
			"free-reports": {"", "2", "2"},
			"free-global":  {"45", "", "600"},
		})
	})
}

// TestPlanCountsIncludeKeysThroughTheirDeveloper: a key is on its
// developer's plan unless it has its own, and on the default plan when
// neither has one; the plans list counts it where it is.
func TestPlanCountsIncludeKeysThroughTheirDeveloper(t *testing.T) {
	e := newEnv(t)
	starter := e.defaultPlan()
	gold := e.createPlan("gold", searchTier)
	silver := e.createPlan("silver", searchTier)
	ctx := context.Background()
	// dev is on gold with two keys of their own plan-less and one set to silver.
	if _, err := e.pool.Exec(ctx, `UPDATE users SET plan_id = $1 WHERE id = $2`, gold.ID, e.dev.ID); err != nil {
		t.Fatal(err)
	}
	e.createKey(e.dev.ID, "a")
	e.createKey(e.dev.ID, "b")
	k, _ := e.createKey(e.dev.ID, "c")
	if _, err := e.keys.SetPlan(ctx, "test", k.ID, &silver.ID); err != nil {
		t.Fatal(err)
	}
	// another developer with no plan of their own: the default's, key and all.
	other, err := e.users.Create(ctx, users.NewUser{Email: "nobody@example.com", Password: testPassword, Role: users.RoleDeveloper})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `UPDATE users SET plan_id = NULL WHERE id = $1`, other.ID); err != nil {
		t.Fatal(err)
	}
	e.createKey(other.ID, "d")

	c := e.signedIn(operatorEmail)
	d := c.get("/admin/plans", nil).doc(t)
	got := map[string][2]string{}
	d.Find(`[data-testid="plan-row"]`).Each(func(_ int, s *goquery.Selection) {
		slug, _ := s.Attr("data-plan")
		f := func(id string) string { return strings.TrimSpace(s.Find(`[data-testid="` + id + `"]`).Text()) }
		got[slug] = [2]string{f("plan-keys"), f("plan-developers")}
	})
	want := map[string][2]string{starter.Slug: {"1", "1"}, gold.Slug: {"2", "1"}, silver.Slug: {"1", "0"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("plans (keys, developers) = %v, want %v", got, want)
	}
	detail := c.get(fmt.Sprintf("/admin/plans/%d", gold.ID), nil).doc(t)
	if got := text(detail, "plan-counts"); got != "2 keys · 1 developer" {
		t.Errorf("gold's detail counts %q", got)
	}
}

// TestUsagePageNamesEachKeysPlan: a key an operator moved to another plan is
// shown with that plan's name beside that plan's limits.
func TestUsagePageNamesEachKeysPlan(t *testing.T) {
	e := newEnv(t)
	e.defaultPlan()
	pro := e.createPlan("pro", searchTier)
	moved, _ := e.createKey(e.dev.ID, "moved")
	stayed, _ := e.createKey(e.dev.ID, "stayed")
	if _, err := e.keys.SetPlan(context.Background(), "test", moved.ID, &pro.ID); err != nil {
		t.Fatal(err)
	}
	d := e.signedIn(developerEmail).get("/app", nil).doc(t)
	for _, tt := range []struct {
		id           int64
		plan, policy string
	}{{moved.ID, "PRO", "pro-search"}, {stayed.ID, "Starter", "starter-search"}} {
		sec := d.Find(fmt.Sprintf(`[data-testid="usage-key"][data-key="%d"]`, tt.id))
		if got := strings.TrimSpace(sec.Find(`[data-testid="usage-key-plan"]`).Text()); got != tt.plan {
			t.Errorf("key %d: plan %q, want %q", tt.id, got, tt.plan)
		}
		if sec.Find(fmt.Sprintf(`[data-policy="%s"]`, tt.policy)).Length() != 1 {
			t.Errorf("key %d: no %s limit beside its plan", tt.id, tt.policy)
		}
	}
	if count(d, "usage-mixed-plans") != 1 {
		t.Error("the page names one plan while a key is on another, without saying so")
	}
}

// TestFiguresSayWhatHappened: no traffic is a peak of 0; a key set to
// expire on a day is listed with that day; after a rotation with a grace
// the lists say the previous secret still works, and until when.
func TestFiguresSayWhatHappened(t *testing.T) {
	e := newEnv(t)
	e.defaultPlan()
	op := e.signedIn(operatorEmail)
	dev := e.signedIn(developerEmail)

	t.Run("no traffic, no peak", func(t *testing.T) {
		if got := text(op.get("/admin", nil).doc(t), "peak-rate"); got != "0.0" {
			t.Errorf("peak requests/s with no traffic = %q, want 0.0", got)
		}
	})

	t.Run("expiry is the day chosen", func(t *testing.T) {
		day := time.Now().UTC().AddDate(0, 0, 10).Format(time.DateOnly)
		if res := dev.post("/app/keys", url.Values{"name": {"expiring"}, "expires": {day}}, nil); res.StatusCode != http.StatusSeeOther {
			t.Fatalf("create: status %d", res.StatusCode)
		}
		keys, _, err := e.keys.List(context.Background(), apikeys.Filter{UserID: e.dev.ID, Limit: 10})
		if err != nil || len(keys) != 1 {
			t.Fatalf("keys %v, %v", keys, err)
		}
		want := "end of " + day
		mine := dev.get("/app/keys", nil).doc(t)
		if got := text(mine, "my-key-expires"); got != want {
			t.Errorf("developer's list: expires %q, want %q", got, want)
		}
		if got := text(op.get("/admin/keys", nil).doc(t), "key-expires"); got != want {
			t.Errorf("operator's list: expires %q, want %q", got, want)
		}
		if got := text(op.get("/admin/keys/"+strconv.FormatInt(keys[0].ID, 10), nil).doc(t), "key-expires"); got != want {
			t.Errorf("operator's key page: expires %q, want %q", got, want)
		}
	})

	t.Run("the previous secret's grace is shown", func(t *testing.T) {
		k, _ := e.createKey(e.dev.ID, "rotating")
		path := "/app/keys/" + strconv.FormatInt(k.ID, 10)
		for _, l := range []struct {
			c    *client
			page string
			id   string
		}{{dev, "/app/keys", "my-key-grace"}, {op, "/admin/keys", "key-grace"}, {op, "/admin/keys/" + strconv.FormatInt(k.ID, 10), "key-grace"}} {
			d := l.c.get(l.page, nil).doc(t)
			if count(d, l.id) != 0 {
				t.Errorf("%s before any rotation shows a grace", l.page)
			}
		}
		if res := dev.post(path+"/rotate", url.Values{"grace_seconds": {"3600"}}, nil); res.StatusCode != http.StatusSeeOther {
			t.Fatalf("rotate: status %d", res.StatusCode)
		}
		cur, err := e.keys.Get(context.Background(), k.ID)
		if err != nil || cur.PreviousSecretUntil == nil {
			t.Fatalf("after rotation: previous secret until %v, %v", cur.PreviousSecretUntil, err)
		}
		want := "previous secret works until " + cur.PreviousSecretUntil.UTC().Format("2006-01-02 15:04") + " UTC"
		mine := dev.get("/app/keys", nil).doc(t)
		if got := strings.TrimSpace(mine.Find(fmt.Sprintf(`[data-testid="my-key"][data-key="%d"] [data-testid="my-key-grace"]`, k.ID)).Text()); got != want {
			t.Errorf("developer's list: %q, want %q", got, want)
		}
		all := op.get("/admin/keys", nil).doc(t)
		if got := strings.TrimSpace(all.Find(fmt.Sprintf(`[data-testid="key-row"][data-key="%d"] [data-testid="key-grace"]`, k.ID)).Text()); got != want {
			t.Errorf("operator's list: %q, want %q", got, want)
		}
		if got := text(op.get("/admin/keys/"+strconv.FormatInt(k.ID, 10), nil).doc(t), "key-grace"); got != want {
			t.Errorf("operator's key page: %q, want %q", got, want)
		}
	})
}

// TestPeopleReadNamesNotCodes: the audit log names people by email and
// plans by name, tiers say their algorithm in words and their effective
// burst, empty tables say why, and /favicon.ico is not a 404.
func TestPeopleReadNamesNotCodes(t *testing.T) {
	e := newEnv(t)
	c := e.signedIn(operatorEmail)

	t.Run("empty tables say why", func(t *testing.T) {
		for _, tt := range []struct{ path, id string }{
			{"/admin/keys", "keys-empty"},
			{"/admin/developers?q=nobody-has-this", "developers-empty"},
			{"/admin", "consumers-empty"},
			{"/admin", "rejected-empty"},
		} {
			if count(c.get(tt.path, nil).doc(t), tt.id) != 1 {
				t.Errorf("%s: no %s message", tt.path, tt.id)
			}
		}
	})

	p := e.createPlan("gold", plans.LimitInput{Name: "items", Route: "GET /api/items/{id}", Algorithm: "token_bucket", Limit: 7, WindowSeconds: 60})
	form := url.Values{"version": {strconv.Itoa(e.dev.Version)}, "plan_id": {strconv.FormatInt(p.ID, 10)}}
	if res := c.post(fmt.Sprintf("/admin/developers/%d/plan", e.dev.ID), form, nil); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("set plan: status %d", res.StatusCode)
	}

	t.Run("audit log", func(t *testing.T) {
		d := c.get(fmt.Sprintf("/admin/audit?object_type=user&object_id=%d", e.dev.ID), nil).doc(t)
		if got := text(d, "audit-row-actor"); got != operatorEmail {
			t.Errorf("actor %q, want %q", got, operatorEmail)
		}
		if got := text(d, "audit-row-object"); got != "user "+developerEmail {
			t.Errorf("object %q, want %q", got, "user "+developerEmail)
		}
		plan := c.get(fmt.Sprintf("/admin/audit?object_type=plan&object_id=%d", p.ID), nil).doc(t)
		if got := text(plan, "audit-row-object"); got != "plan GOLD" {
			t.Errorf("plan object %q, want %q", got, "plan GOLD")
		}
		byEmail := c.get("/admin/audit?actor="+url.QueryEscape(operatorEmail), nil)
		if byEmail.StatusCode != http.StatusOK || count(byEmail.doc(t), "audit-row") == 0 {
			t.Errorf("filter by the operator's email: status %d, %d rows", byEmail.StatusCode, count(byEmail.doc(t), "audit-row"))
		}
		unknown := c.get("/admin/audit?actor=ghost%40example.com", nil)
		if unknown.StatusCode != http.StatusUnprocessableEntity || text(unknown.doc(t), "error-actor") != "no user has this email" {
			t.Errorf("filter by an unknown email: status %d, error %q", unknown.StatusCode, text(unknown.doc(t), "error-actor"))
		}
	})

	t.Run("tiers in words", func(t *testing.T) {
		d := c.get(fmt.Sprintf("/admin/plans/%d", p.ID), nil).doc(t)
		if got := text(d, "tier-algorithm"); got != "Token bucket" {
			t.Errorf("algorithm %q, want Token bucket", got)
		}
		if got := text(d, "tier-burst"); got != "7" {
			t.Errorf("burst of a token bucket with none set = %q, want its limit 7 (as the docs say)", got)
		}
	})

	t.Run("favicon", func(t *testing.T) {
		res := c.get("/favicon.ico", nil)
		if res.StatusCode != http.StatusMovedPermanently {
			t.Fatalf("status %d, want 301", res.StatusCode)
		}
		icon := c.get(res.Header.Get("Location"), nil)
		if icon.StatusCode != http.StatusOK || icon.Header.Get("Content-Type") != "image/svg+xml" {
			t.Errorf("icon: status %d, type %q", icon.StatusCode, icon.Header.Get("Content-Type"))
		}
	})
}

// TestTierFormsKeepWhatWasTyped: a refused tier form names the field and
// shows what was typed, never what parsing made of it; a typed cost of 0 is
// refused rather than saved as 1.
func TestTierFormsKeepWhatWasTyped(t *testing.T) {
	e := newEnv(t)
	p := e.createPlan("gold", searchTier)
	c := e.signedIn(operatorEmail)
	base := url.Values{"version": {strconv.Itoa(p.Version)}, "name": {"items"}, "route": {"GET /api/items/{id}"},
		"algorithm": {"fixed_window"}, "limit": {"10"}, "window_seconds": {"60"}, "cost": {"1"}}
	for _, tt := range []struct {
		field, typed, input, want string
	}{
		{"limit", "99999999999999999999", "tier-input-limit", "is too large"},
		{"window_seconds", "1.5", "tier-input-window", "must be a whole number"},
		{"cost", "0", "tier-input-cost", "must be at least 1 (leave it blank for 1)"},
	} {
		t.Run(tt.field, func(t *testing.T) {
			form := url.Values{}
			for k, v := range base {
				form[k] = v
			}
			form.Set(tt.field, tt.typed)
			res := c.post(fmt.Sprintf("/admin/plans/%d/limits", p.ID), form, nil)
			if res.StatusCode != http.StatusUnprocessableEntity {
				t.Fatalf("status %d, want 422", res.StatusCode)
			}
			d := res.doc(t)
			if got := text(d, "error-"+tt.field); got != tt.want {
				t.Errorf("error-%s = %q, want %q", tt.field, got, tt.want)
			}
			// The add form is the last one on the page.
			if got, _ := d.Find(`[data-testid="` + tt.input + `"]`).Last().Attr("value"); got != tt.typed {
				t.Errorf("%s shows %q, want what was typed, %q", tt.input, got, tt.typed)
			}
			cur, err := e.plans.Get(context.Background(), p.ID)
			if err != nil || len(cur.Limits) != 1 {
				t.Errorf("the refused tier was saved: %d tiers, %v", len(cur.Limits), err)
			}
		})
	}
}
