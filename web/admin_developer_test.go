package web_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"github.com/sluicehq/sluice/internal/billing"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/plans"
)

// TestDeveloperQuotaControls: an operator grants units of a developer's
// quota and resets it from the developer's page, through the same path
// as the admin API; the figures move, bad units get a field error, a
// developer is refused, and every change is in the audit log by name.
func TestDeveloperQuotaControls(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	p, err := e.plans.Create(ctx, "test", plans.PlanInput{
		Slug: "metered", Name: "Metered", IsPublic: true, IsDefault: true,
		Limits: []plans.LimitInput{
			{Name: "monthly", Algorithm: "quota", Period: "month", Limit: 5},
			// An endpoint tier counts per key: no account-wide count.
			{Name: "searches", Algorithm: "quota", Period: "day", Limit: 100, Route: "GET /api/search"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	anchor, err := billing.Get(ctx, e.pool, e.dev.ID)
	if err != nil {
		t.Fatal(err)
	}
	req := enforce.Request{Subject: enforce.DeveloperSubject(e.dev.ID), Limits: []enforce.Limit{p.Limits[0].Enforce(p.Slug)}, Anchor: anchor.Effective}
	for range 2 {
		if d, err := e.store.Allow(ctx, req); err != nil || !d.Allowed {
			t.Fatalf("Allow: %+v %v", d, err)
		}
	}
	page := fmt.Sprintf("/admin/developers/%d", e.dev.ID)
	// figures reads the monthly row: used, limit, granted, remaining.
	figures := func(d *goquery.Document) [4]string {
		row := d.Find(`[data-testid="quota-row"][data-quota="monthly"]`)
		var out [4]string
		for i, id := range []string{"quota-used", "quota-limit", "quota-granted", "quota-remaining"} {
			out[i] = strings.TrimSpace(row.Find(`[data-testid="` + id + `"]`).Text())
		}
		return out
	}
	op := e.signedIn(operatorEmail)
	d := op.get(page, nil).doc(t)
	if got := figures(d); got != [4]string{"2", "5", "0", "3"} {
		t.Fatalf("used/limit/granted/remaining = %q, want 2, 5, 0, 3", got)
	}
	if got := text(d, "anchor-current"); !strings.Contains(got, "the sign-up instant") {
		t.Errorf("anchor = %q, want the sign-up instant", got)
	}

	t.Run("GrantMovesTheFigure", func(t *testing.T) {
		res := op.post(page+"/quota-grants", url.Values{"limit": {"monthly"}, "units": {"10"}}, htmx)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("grant: %d %s", res.StatusCode, res.body)
		}
		d := res.doc(t)
		if got := figures(d); got != [4]string{"2", "5", "10", "13"} {
			t.Errorf("used/limit/granted/remaining after granting 10 = %q, want 2, 5, 10, 13", got)
		}
		if got := text(d, "saved"); !strings.Contains(got, "Granted 10 units of monthly") {
			t.Errorf("message = %q", got)
		}
		// Without htmx: the form posts and is sent back to the page.
		res = op.post(page+"/quota-grants", url.Values{"limit": {"monthly"}, "units": {"1"}}, nil)
		if loc := res.Header.Get("Location"); res.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, page+"?") {
			t.Fatalf("plain grant: %d %q, want a redirect to the page", res.StatusCode, loc)
		}
		d = op.get(res.Header.Get("Location"), nil).doc(t)
		if got := figures(d); got != [4]string{"2", "5", "11", "14"} {
			t.Errorf("used/limit/granted/remaining after another unit = %q, want 2, 5, 11, 14", got)
		}
		if got := text(d, "saved"); !strings.Contains(got, "Granted 1 unit of monthly") {
			t.Errorf("message after the redirect = %q", got)
		}
		// A link cannot make the page report a grant of a quota it lacks.
		if n := count(op.get(page+"?done=grant&limit=everything&units=99", nil).doc(t), "saved"); n != 0 {
			t.Errorf("crafted outcome shown %d times, want none", n)
		}
	})

	t.Run("InvalidUnitsAreAFieldError", func(t *testing.T) {
		for _, units := range []string{"", "0", "-3", "1.5", "abc", "1000000000001"} {
			res := op.post(page+"/quota-grants", url.Values{"limit": {"monthly"}, "units": {units}}, htmx)
			if res.StatusCode != http.StatusUnprocessableEntity {
				t.Errorf("units %q: status %d, want 422", units, res.StatusCode)
				continue
			}
			d := res.doc(t)
			if got := text(d, "error-units"); !strings.Contains(got, "whole number from 1 to") {
				t.Errorf("units %q: error %q", units, got)
			}
			if got, _ := d.Find(`[data-quota="monthly"] [data-testid="quota-grant-units"]`).Attr("value"); got != strings.TrimSpace(units) {
				t.Errorf("units %q: field kept %q", units, got)
			}
		}
		for _, limit := range []string{"nope", "searches"} {
			res := op.post(page+"/quota-grants", url.Values{"limit": {limit}, "units": {"1"}}, htmx)
			if res.StatusCode != http.StatusUnprocessableEntity {
				t.Errorf("grant of %s: status %d, want 422", limit, res.StatusCode)
			}
			want := map[string]string{"nope": "has no quota tier of this name", "searches": "counted per API key"}[limit]
			if got := text(res.doc(t), "error-limit"); !strings.Contains(got, want) {
				t.Errorf("grant of %s: error %q, want %q", limit, got, want)
			}
			if res := op.post(page+"/quota-resets", url.Values{"limit": {limit}, "confirm": {"reset"}}, nil); res.StatusCode != http.StatusUnprocessableEntity {
				t.Errorf("reset of %s: status %d, want 422", limit, res.StatusCode)
			}
		}
		if n := count(op.get(page, nil).doc(t), "quota-per-key"); n != 1 {
			t.Errorf("per-key notes = %d, want 1 (searches)", n)
		}
		res := op.post(page+"/quota-grants", url.Values{"limit": {"nope"}, "units": {"1"}}, nil)
		if got := strings.TrimSpace(res.doc(t).Find(`[data-quota="monthly"] [data-testid="quota-remaining"]`).Text()); got != "14" {
			t.Errorf("remaining after refused grants = %q, want 14 (unchanged)", got)
		}
	})

	t.Run("ResetAsksThenResets", func(t *testing.T) {
		res := op.post(page+"/quota-resets", url.Values{"limit": {"monthly"}}, nil)
		if res.StatusCode != http.StatusOK || count(res.doc(t), "reset-confirm") != 1 {
			t.Fatalf("reset without confirm: %d, want the confirmation page", res.StatusCode)
		}
		if got := strings.TrimSpace(op.get(page, nil).doc(t).Find(`[data-quota="monthly"] [data-testid="quota-remaining"]`).Text()); got != "14" {
			t.Fatalf("asking reset something: remaining %q, want 14", got)
		}
		res = op.post(page+"/quota-resets", url.Values{"limit": {"monthly"}, "confirm": {"reset"}}, nil)
		if res.StatusCode != http.StatusSeeOther {
			t.Fatalf("confirmed reset: %d %s", res.StatusCode, res.body)
		}
		d := op.get(res.Header.Get("Location"), nil).doc(t)
		if got := figures(d); got != [4]string{"0", "5", "0", "5"} {
			t.Errorf("used/limit/granted/remaining after the reset = %q, want 0, 5, 0, 5: the grants go with the count", got)
		}
		if got := text(d, "saved"); !strings.Contains(got, "Reset monthly") {
			t.Errorf("message = %q", got)
		}
	})

	t.Run("BillingAnchor", func(t *testing.T) {
		res := op.post(page+"/billing-anchor", url.Values{"billing_anchor": {"2026-03-15T09:30"}}, htmx)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("set anchor: %d %s", res.StatusCode, res.body)
		}
		if got := text(res.doc(t), "anchor-effective"); got != "2026-03-15 09:30 UTC" {
			t.Errorf("anchor shown = %q", got)
		}
		if got := text(res.doc(t), "saved"); !strings.Contains(got, "Billing anchor set to 2026-03-15 09:30 UTC") {
			t.Errorf("message = %q", got)
		}
		got, err := billing.Get(ctx, e.pool, e.dev.ID)
		if want := time.Date(2026, 3, 15, 9, 30, 0, 0, time.UTC); err != nil || got.Set == nil || !got.Set.Equal(want) {
			t.Errorf("stored anchor = %+v %v, want %s", got, err, want)
		}
		res = op.post(page+"/billing-anchor", url.Values{"billing_anchor": {"15/03/2026"}}, htmx)
		if res.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(text(res.doc(t), "error-billing_anchor"), "date and time") {
			t.Errorf("bad anchor: %d %q", res.StatusCode, text(res.doc(t), "error-billing_anchor"))
		}
		res = op.post(page+"/billing-anchor", url.Values{"clear": {"1"}}, htmx)
		if res.StatusCode != http.StatusOK || !strings.Contains(text(res.doc(t), "anchor-current"), "the sign-up instant") {
			t.Errorf("clear: %d %q", res.StatusCode, text(res.doc(t), "anchor-current"))
		}
	})

	t.Run("DeveloperIsRefused", func(t *testing.T) {
		dev := e.signedIn(developerEmail)
		for _, path := range []string{page + "/quota-grants", page + "/quota-resets", page + "/billing-anchor"} {
			res := dev.post(path, url.Values{"limit": {"monthly"}, "units": {"1000"}, "confirm": {"reset"}, "clear": {"1"}}, nil)
			if res.StatusCode != http.StatusForbidden {
				t.Errorf("developer POST %s: %d, want 403", path, res.StatusCode)
			}
		}
		if res := dev.get(page, nil); res.StatusCode != http.StatusForbidden {
			t.Errorf("developer GET page: %d, want 403", res.StatusCode)
		}
		if got := strings.TrimSpace(op.get(page, nil).doc(t).Find(`[data-quota="monthly"] [data-testid="quota-remaining"]`).Text()); got != "5" {
			t.Errorf("remaining after the developer's tries = %q, want 5", got)
		}
	})

	t.Run("CrossSitePostIsRefused", func(t *testing.T) {
		res := op.post(page+"/quota-grants", url.Values{"limit": {"monthly"}, "units": {"1000"}}, http.Header{"Sec-Fetch-Site": {"cross-site"}})
		if res.StatusCode != http.StatusForbidden {
			t.Errorf("cross-site grant: %d, want 403", res.StatusCode)
		}
	})

	t.Run("AuditNamesOperatorAndDeveloper", func(t *testing.T) {
		want := map[string]int{"quota.grant": 2, "quota.reset": 1, "user.set_billing_anchor": 2}
		for action, n := range want {
			var got int
			if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE action = $1 AND object_type = 'user' AND object_id = $2 AND actor = $3`,
				action, fmt.Sprint(e.dev.ID), fmt.Sprintf("user:%d", e.operator.ID)).Scan(&got); err != nil || got != n {
				t.Errorf("%s by the operator: %d entries (%v), want %d", action, got, err, n)
			}
		}
		d := op.get(fmt.Sprintf("/admin/audit?object_type=user&object_id=%d", e.dev.ID), nil).doc(t)
		seen := map[string]bool{}
		d.Find(`[data-testid="audit-row"]`).Each(func(_ int, s *goquery.Selection) {
			action := strings.TrimSpace(s.Find(`[data-testid="audit-row-action"]`).Text())
			seen[action] = true
			if a := s.Find(`[data-testid="audit-row-actor"]`).Text(); !strings.Contains(a, operatorEmail) {
				t.Errorf("%s: actor %q, want %s", action, a, operatorEmail)
			}
			if o := s.Find(`[data-testid="audit-row-object"]`).Text(); !strings.Contains(o, developerEmail) {
				t.Errorf("%s: object %q, want %s", action, o, developerEmail)
			}
		})
		for action := range want {
			if !seen[action] {
				t.Errorf("audit page shows no %s (saw %v)", action, seen)
			}
		}
	})
}
