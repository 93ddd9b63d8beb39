package web_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/plans"
)

// TestRefusedShadowTierIsNotKeptShadow: a shadow tier the form refuses
// comes back with the mode set back to reject, saying so, so the next tier
// added is not silently a shadow tier.
func TestRefusedShadowTierIsNotKeptShadow(t *testing.T) {
	e := newEnv(t)
	p := e.createPlan("team")
	c := e.signedIn(operatorEmail)
	res := c.post(fmt.Sprintf("/admin/plans/%d/limits", p.ID),
		tierForm(p.Version, "trial", "", "fixed_window", "0", "60", "", "1", "shadow"), nil)
	if res.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("a shadow tier with limit 0: status %d, want 422", res.StatusCode)
	}
	d := res.doc(t)
	form := d.Find(`form[action$="/limits"]`).Last()
	if got := form.Find(`select[name="mode"] option[selected]`).AttrOr("value", ""); got != "reject" {
		t.Errorf("the refused form has mode %q selected, want reject", got)
	}
	if got := fieldErrorsOf(d)["mode"]; !strings.Contains(got, "choose shadow again") {
		t.Errorf("mode note %q, want it to say the mode was set back", got)
	}
}

// TestEnforceAsksFirst: the plan page's Enforce of a shadow tier asks
// before it promotes; only the confirmation enforces, once, audited.
func TestEnforceAsksFirst(t *testing.T) {
	e := newEnv(t)
	p := e.createPlan("team", plans.LimitInput{Name: "trial", Algorithm: "fixed_window", Limit: 5, WindowSeconds: 60, Mode: "shadow"})
	c := e.signedIn(operatorEmail)
	page := c.get(fmt.Sprintf("/admin/plans/%d", p.ID), nil).doc(t)
	enforceForm := page.Find(`[data-testid="tier-promote"]`).Closest("form")
	action, _ := enforceForm.Attr("action")
	version, _ := enforceForm.Find(`input[name="version"]`).Attr("value")
	if action == "" || version == "" {
		t.Fatal("no Enforce form on the plan page")
	}
	res := c.post(action, url.Values{"version": {version}}, nil)
	d := res.doc(t)
	if res.StatusCode != http.StatusOK || count(d, "promote-confirm") != 1 || !strings.Contains(text(d, "promote-question"), "429") {
		t.Fatalf("Enforce: status %d, want a confirmation page; %q", res.StatusCode, text(d, "promote-question"))
	}
	got, err := e.plans.Get(context.Background(), p.ID)
	if err != nil || got.Limits[0].Mode != enforce.ModeShadow {
		t.Fatalf("the tier was enforced before the confirmation: %v %v", got.Limits, err)
	}
	confirm := url.Values{}
	d.Find(`[data-testid="promote-form"] input`).Each(func(_ int, s *goquery.Selection) {
		confirm.Set(s.AttrOr("name", ""), s.AttrOr("value", ""))
	})
	if confirm.Get("version") != strconv.Itoa(p.Version) {
		t.Errorf("the confirmation carries version %q, want the page's %d", confirm.Get("version"), p.Version)
	}
	if res := c.post(action, confirm, nil); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("confirm: status %d", res.StatusCode)
	}
	got, err = e.plans.Get(context.Background(), p.ID)
	if err != nil || got.Limits[0].Mode != enforce.ModeReject {
		t.Fatalf("after the confirmation: %v %v", got.Limits, err)
	}
	var n int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM audit_log WHERE action = 'limit.promote'`).Scan(&n); err != nil || n != 1 {
		t.Errorf("%d limit.promote audit entries, want 1 (%v)", n, err)
	}
}
