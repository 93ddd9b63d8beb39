package web_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/web"
)

// TestTierFormPrecision: the tier form sets a tier's precision; its row
// states the worst case with the portal's PORTAL_INSTANCES, as the edit
// form does under the select; a concurrency tier refuses leased naming the
// rule and keeps the form. The generated docs state the same bound.
func TestTierFormPrecision(t *testing.T) {
	e := newEnvWith(t, func(d *web.Deps) { d.Instances = 2 })
	p := e.createPlan("team")
	c := e.signedIn(operatorEmail)
	add := fmt.Sprintf("/admin/plans/%d/limits", p.ID)

	page := c.get(fmt.Sprintf("/admin/plans/%d", p.ID), nil).doc(t)
	if sel, _ := page.Find(`[data-testid="tier-add-form"] [data-testid="tier-input-precision"] option[selected]`).Attr("value"); sel != "exact" {
		t.Errorf("the add form's precision defaults to %q, want exact", sel)
	}

	form := tierForm(p.Version, "items", "GET /api/items/{id}", "sliding_window_log", "2000", "60", "", "1", "reject")
	form.Set("precision", "leased")
	if res := c.post(add, form, nil); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("add a leased tier: status %d %v", res.StatusCode, fieldErrorsOf(res.doc(t)))
	}
	got, err := e.plans.Get(context.Background(), p.ID)
	if err != nil || len(got.Limits) != 1 || got.Limits[0].Precision != enforce.PrecisionLeased {
		t.Fatalf("saved %+v, %v", got.Limits, err)
	}
	const bound = "leased: at most 40 over, at most 40 under the limit per window with 2 instances; leases of up to 20"
	page = c.get(fmt.Sprintf("/admin/plans/%d", p.ID), nil).doc(t)
	if got := text(page, "tier-precision"); got != bound {
		t.Errorf("the row says %q, want %q", got, bound)
	}
	edit := c.get(fmt.Sprintf("/admin/plans/%d/limits/%d/edit", p.ID, got.Limits[0].ID), nil).doc(t)
	if sel, _ := edit.Find(`[data-testid="tier-edit-row"] [data-testid="tier-input-precision"] option[selected]`).Attr("value"); sel != "leased" {
		t.Errorf("the edit form's precision is %q, want leased", sel)
	}
	if got := text(edit, "tier-precision-bound"); got != bound {
		t.Errorf("the edit form says %q, want %q", got, bound)
	}

	// The generated docs tell developers the same figures, and what
	// their headers' Remaining then is.
	d := c.get("/docs", nil).doc(t)
	prec := d.Find(`[data-testid="docs-precision"][data-precision="leased"]`).First()
	if got := strings.TrimSpace(prec.Text()); !strings.Contains(got, "X-RateLimit-Remaining is what that instance holds") ||
		!strings.Contains(got, "at most 40 over, at most 40 under the limit per window with 2 instances; leases of up to 20") {
		t.Errorf("the docs say %q", got)
	}

	form = tierForm(got.Version, "inflight", "", "concurrency", "5", "60", "", "1", "reject")
	form.Set("precision", "leased")
	res := c.post(add, form, nil)
	if res.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("leased concurrency: status %d, want 422", res.StatusCode)
	}
	d = res.doc(t)
	if got := fieldErrorsOf(d)["precision"]; got != "a concurrency limit is always exact" {
		t.Errorf("precision error %q", got)
	}
	if sel, _ := d.Find(`[data-testid="tier-add-form"] [data-testid="tier-input-precision"] option[selected]`).Attr("value"); sel != "leased" {
		t.Errorf("the refused form shows precision %q, want leased as chosen", sel)
	}
	if after, _ := e.plans.Get(context.Background(), p.ID); len(after.Limits) != 1 {
		t.Errorf("a refused tier was saved: %d tiers", len(after.Limits))
	}

	form.Set("version", strconv.Itoa(got.Version))
	form.Set("algorithm", "fixed_window")
	form.Set("name", "odd")
	form.Set("precision", "roughly")
	res = c.post(add, form, nil)
	if res.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(fieldErrorsOf(res.doc(t))["precision"], "exact, leased or local") {
		t.Errorf("precision roughly: status %d, errors %v", res.StatusCode, fieldErrorsOf(res.doc(t)))
	}
}

// TestKeyOverridePrecision: a key's override takes a precision from the
// same select, its row states the bound, and a leased concurrency override
// is refused with the rule.
func TestKeyOverridePrecision(t *testing.T) {
	e := newEnvWith(t, func(d *web.Deps) { d.Instances = 2 })
	gold := e.createPlan("gold", searchTier)
	k, _ := e.createKey(e.dev.ID, "ci")
	c := e.signedIn(operatorEmail)
	base := fmt.Sprintf("/admin/keys/%d", k.ID)
	if res := c.post(base+"/plan", url.Values{"plan_id": {fmt.Sprint(gold.ID)}}, nil); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("set plan: status %d", res.StatusCode)
	}
	cur, _ := e.keys.Get(context.Background(), k.ID)
	form := tierForm(cur.Version, "search", "GET /api/search", "token_bucket", "2000", "60", "0", "1", "reject")
	form.Set("precision", "local")
	if res := c.post(base+"/overrides", form, nil); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("local override: status %d %v", res.StatusCode, fieldErrorsOf(res.doc(t)))
	}
	got, _ := e.keys.Get(context.Background(), k.ID)
	if len(got.Overrides) != 1 || got.Overrides[0].Precision != "local" {
		t.Fatalf("overrides %+v", got.Overrides)
	}
	if want := "local: each of 2 instances enforces 1000 on its own, no Redis; a caller reaching one instance gets 1000"; text(c.get(base, nil).doc(t), "override-precision") != want {
		t.Errorf("the override row says %q, want %q", text(c.get(base, nil).doc(t), "override-precision"), want)
	}

	form = tierForm(got.Version, "inflight", "", "concurrency", "3", "60", "0", "1", "reject")
	form.Set("precision", "leased")
	res := c.post(base+"/overrides", form, nil)
	if res.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("leased concurrency override: status %d, want 422", res.StatusCode)
	}
	if got := fieldErrorsOf(res.doc(t))["precision"]; got != "a concurrency limit is always exact" {
		t.Errorf("precision error %q (all: %v)", got, fieldErrorsOf(res.doc(t)))
	}
}
