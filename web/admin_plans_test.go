package web_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/plans"
)

func tierForm(version int, name, route, algorithm, limit, window, burst, cost, mode string) url.Values {
	return url.Values{
		"version": {fmt.Sprint(version)}, "name": {name}, "route": {route}, "algorithm": {algorithm},
		"limit": {limit}, "window_seconds": {window}, "burst": {burst}, "cost": {cost}, "mode": {mode},
	}
}

func TestPlanCreate(t *testing.T) {
	e := newEnv(t)
	e.createPlan("taken")
	c := e.signedIn(operatorEmail)
	tests := []struct {
		name       string
		form       url.Values
		wantStatus int
		wantErrors map[string]string
	}{
		{name: "Created", form: url.Values{"slug": {"team"}, "name": {"Team"}, "is_public": {"1"}},
			wantStatus: http.StatusSeeOther, wantErrors: map[string]string{}},
		{name: "BadSlugAndNoName", form: url.Values{"slug": {"Bad Slug"}, "name": {""}},
			wantStatus: http.StatusUnprocessableEntity, wantErrors: map[string]string{
				"slug": "must be 1 to 63 lowercase letters, digits or dashes, starting with a letter or digit",
				"name": "must be 1 to 100 characters"}},
		{name: "SlugTaken", form: url.Values{"slug": {"taken"}, "name": {"Again"}},
			wantStatus: http.StatusConflict, wantErrors: map[string]string{"slug": "is already used by another plan"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := c.post("/admin/plans", tt.form, nil)
			if res.StatusCode != tt.wantStatus {
				t.Fatalf("status %d, want %d", res.StatusCode, tt.wantStatus)
			}
			d := res.doc(t)
			got := map[string]string{}
			d.Find(`.field-error`).Each(func(_ int, s *goquery.Selection) {
				id, _ := s.Attr("data-testid")
				got[strings.TrimPrefix(id, "error-")] = strings.TrimSpace(s.Text())
			})
			if fmt.Sprint(got) != fmt.Sprint(tt.wantErrors) {
				t.Errorf("field errors = %v, want %v", got, tt.wantErrors)
			}
			if tt.wantStatus == http.StatusSeeOther {
				p, err := e.plans.GetBySlug(context.Background(), "team")
				if err != nil {
					t.Fatalf("plan not created: %v", err)
				}
				if want := fmt.Sprintf("/admin/plans/%d", p.ID); res.Header.Get("Location") != want {
					t.Errorf("Location %q, want %q", res.Header.Get("Location"), want)
				}
			} else if v, _ := d.Find(`[data-testid="plan-name-input"]`).Attr("value"); v != tt.form.Get("name") {
				t.Errorf("form lost the typed name: %q", v)
			}
		})
	}
}

func TestPlansListShowsCountsAndTraffic(t *testing.T) {
	e := newEnv(t)
	gold := e.createPlan("gold", searchTier)
	e.createPlan("empty")
	k, _ := e.createKey(e.dev.ID, "ci")
	if _, err := e.keys.SetPlan(context.Background(), "test", k.ID, &gold.ID); err != nil {
		t.Fatal(err)
	}
	// Traffic on the key: 3 admitted, then rejections from a 3-request limit.
	lim := plans.LimitInput{Name: "tiny", Algorithm: "fixed_window", Limit: 3, WindowSeconds: 60}.Enforce("gold")
	for range 5 {
		if _, err := e.store.Allow(context.Background(), enforceRequest(k, lim)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.pool.Exec(context.Background(), `UPDATE api_keys SET last_used_at = now() WHERE id = $1`, k.ID); err != nil {
		t.Fatal(err)
	}
	d := e.signedIn(operatorEmail).get("/admin/plans", nil).doc(t)
	rows := map[string][4]string{}
	d.Find(`[data-testid="plan-row"]`).Each(func(_ int, s *goquery.Selection) {
		slug, _ := s.Attr("data-plan")
		f := func(id string) string { return strings.TrimSpace(s.Find(`[data-testid="` + id + `"]`).Text()) }
		rows[slug] = [4]string{f("plan-tiers"), f("plan-keys"), f("plan-requests"), f("plan-rejected")}
	})
	want := map[string][4]string{"gold": {"1", "1", "5", "2"}, "empty": {"0", "0", "0", "0"}}
	if fmt.Sprint(rows) != fmt.Sprint(want) {
		t.Errorf("rows (tiers, keys, requests, rejected) = %v, want %v", rows, want)
	}
}

func TestTierInlineEditing(t *testing.T) {
	e := newEnv(t)
	p := e.createPlan("gold", searchTier)
	c := e.signedIn(operatorEmail)
	base := fmt.Sprintf("/admin/plans/%d", p.ID)

	t.Run("PageRendersRowsAndPreview", func(t *testing.T) {
		d := c.get(base, nil).doc(t)
		if n := count(d, "tier-row"); n != 1 {
			t.Fatalf("%d tier rows", n)
		}
		if got := text(d, "tier-limit"); got != "10" {
			t.Errorf("limit cell %q", got)
		}
		preview := d.Find(`[data-testid="docs-endpoint"][data-route="GET /api/search"]`)
		if got := preview.Find(`[data-testid="docs-limit"]`).AttrOr("data-policy", ""); got != "gold-search" {
			t.Errorf("docs preview policy %q", got)
		}
		if got := preview.Find(`[data-testid="docs-headers"]`).Text(); !strings.Contains(got, `RateLimit-Policy: "gold-search";q=10;w=60`) {
			t.Errorf("docs preview headers %q", got)
		}
	})

	var version = p.Version
	t.Run("AddFieldErrorsBesideFields", func(t *testing.T) {
		res := c.post(base+"/limits", tierForm(version, "burst", "", "fixed_window", "0", "0", "5", "1", "reject"), htmx)
		if res.StatusCode != http.StatusUnprocessableEntity {
			t.Fatalf("status %d", res.StatusCode)
		}
		d := res.doc(t)
		for field, want := range map[string]string{
			"limit":          "must be at least 1",
			"window_seconds": "must be from 1 second to 2678400 (31 days)",
			"burst":          "must be 0: only token_bucket and leaky_bucket use a burst",
		} {
			if got := text(d, "error-"+field); got != want {
				t.Errorf("%s error %q, want %q", field, got, want)
			}
			if inv, _ := d.Find(`#tier-add [name="` + field + `"]`).Attr("aria-invalid"); inv != "true" {
				t.Errorf("%s not marked invalid", field)
			}
		}
		if d.Find("html").Length() != 0 && strings.Contains(res.body, "<html") {
			t.Errorf("htmx request got a whole page")
		}
	})

	t.Run("AddWithHTMXAppendsRow", func(t *testing.T) {
		res := c.post(base+"/limits", tierForm(version, "items", "GET /api/items/{id}", "sliding_window_log", "100", "60", "0", "1", "reject"), htmx)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", res.StatusCode, res.body)
		}
		if strings.Contains(res.body, "<html") {
			t.Errorf("htmx request got a whole page")
		}
		d := res.doc(t)
		oob := d.Find(`[hx-swap-oob="beforeend:#tiers"] [data-testid="tier-row"]`)
		if name, _ := oob.Attr("data-tier"); oob.Length() != 1 || name != "items" {
			t.Fatalf("appended rows %d (%q)", oob.Length(), name)
		}
		v, _ := d.Find(`#plan-version`).Attr("value")
		version++
		if v != fmt.Sprint(version) {
			t.Errorf("plan version sent %q, want %d", v, version)
		}
	})

	cur, _ := e.plans.Get(context.Background(), p.ID)
	tierPath := fmt.Sprintf("%s/limits/%d", base, cur.Limits[0].ID)
	t.Run("EditFormFragment", func(t *testing.T) {
		res := c.get(tierPath+"/edit", htmx)
		d := res.doc(t)
		if res.StatusCode != http.StatusOK || count(d, "tier-edit-row") != 1 || strings.Contains(res.body, "<html") {
			t.Fatalf("status %d, edit rows %d", res.StatusCode, count(d, "tier-edit-row"))
		}
		if v, _ := d.Find(`[data-testid="tier-input-limit"]`).Attr("value"); v != "10" {
			t.Errorf("limit input %q", v)
		}
	})

	t.Run("EditWithoutJavaScriptShowsWholePage", func(t *testing.T) {
		res := c.get(tierPath+"/edit", nil)
		d := res.doc(t)
		if res.StatusCode != http.StatusOK || count(d, "tier-edit-row") != 1 || count(d, "nav") != 1 {
			t.Fatalf("status %d, edit rows %d, nav %d", res.StatusCode, count(d, "tier-edit-row"), count(d, "nav"))
		}
	})

	t.Run("SaveWithHTMXSwapsRow", func(t *testing.T) {
		form := tierForm(version, "search", "GET /api/search", "token_bucket", "25", "60", "30", "1", "reject")
		res := c.post(tierPath, form, htmx)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", res.StatusCode, res.body)
		}
		d := res.doc(t)
		if got := text(d, "tier-limit"); got != "25" {
			t.Errorf("row limit %q", got)
		}
		oob := d.Find(`[hx-swap-oob="innerHTML:#docs-preview"] [data-route="GET /api/search"] [data-testid="docs-headers"]`)
		if got := oob.Text(); !strings.Contains(got, `RateLimit-Policy: "gold-search";q=25;w=60`) {
			t.Errorf("the docs preview did not follow the edit: %q", got)
		}
		version++
		if v, _ := d.Find(`#plan-version`).Attr("value"); v != fmt.Sprint(version) {
			t.Errorf("version %q, want %d", v, version)
		}
	})

	t.Run("StaleVersionShowsConflict", func(t *testing.T) {
		form := tierForm(version-1, "search", "GET /api/search", "token_bucket", "99", "60", "30", "1", "reject")
		res := c.post(tierPath, form, htmx)
		if res.StatusCode != http.StatusConflict {
			t.Fatalf("status %d", res.StatusCode)
		}
		d := res.doc(t)
		if got := text(d, "conflict"); !strings.HasPrefix(got, "Someone else saved this plan after you opened it") {
			t.Errorf("conflict message %q", got)
		}
		if v, _ := d.Find(`[data-testid="tier-input-limit"]`).Attr("value"); v != "99" {
			t.Errorf("the operator's input was lost: %q", v)
		}
		got, _ := e.plans.Get(context.Background(), p.ID)
		if got.Limits[0].Limit != 25 {
			t.Errorf("stale save changed the tier to %d", got.Limits[0].Limit)
		}
	})

	t.Run("StaleVersionWithoutJavaScript", func(t *testing.T) {
		form := tierForm(version-1, "search", "GET /api/search", "token_bucket", "99", "60", "30", "1", "reject")
		res := c.post(tierPath, form, nil)
		d := res.doc(t)
		if res.StatusCode != http.StatusConflict || count(d, "nav") != 1 || count(d, "conflict") == 0 {
			t.Fatalf("status %d nav %d conflict %d", res.StatusCode, count(d, "nav"), count(d, "conflict"))
		}
	})

	t.Run("SaveWithoutJavaScriptRedirects", func(t *testing.T) {
		form := tierForm(version, "search", "GET /api/search", "token_bucket", "26", "60", "30", "1", "reject")
		res := c.post(tierPath, form, nil)
		if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != base+"?saved=1" {
			t.Fatalf("status %d Location %q", res.StatusCode, res.Header.Get("Location"))
		}
		version++
	})

	t.Run("RemoveWithHTMX", func(t *testing.T) {
		res := c.post(tierPath+"/delete", url.Values{"version": {"1"}, "plan_version": {fmt.Sprint(version)}}, htmx)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("status %d", res.StatusCode)
		}
		d := res.doc(t)
		if count(d, "tier-row") != 0 {
			t.Errorf("the removed row came back")
		}
		got, _ := e.plans.Get(context.Background(), p.ID)
		if len(got.Limits) != 1 || got.Limits[0].Name != "items" {
			t.Errorf("tiers after remove: %+v", got.Limits)
		}
	})
}

// enforceRequest is a decision for key k as the snapshot would name it.
func enforceRequest(k apikeys.Key, l enforce.Limit) enforce.Request {
	return enforce.Request{Subject: enforce.DeveloperSubject(k.UserID), Key: enforce.KeyScope(k.ID), Route: "GET /api/search", Limits: []enforce.Limit{l}}
}
