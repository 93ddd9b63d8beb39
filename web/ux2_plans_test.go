package web_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/plans"
)

// TestTokenBucketBurstAgreesInTableAndDocs: a token bucket saved with burst
// 0 holds its limit; the tier table and the docs both say so (the table
// said 0 while the docs said 7).
func TestTokenBucketBurstAgreesInTableAndDocs(t *testing.T) {
	e := newEnv(t)
	p := e.createPlan("bucket", plans.LimitInput{Name: "items", Route: "GET /api/items/{id}", Algorithm: "token_bucket", Limit: 7, WindowSeconds: 60})
	c := e.signedIn(operatorEmail)
	if got := text(c.get(fmt.Sprintf("/admin/plans/%d", p.ID), nil).doc(t), "tier-burst"); got != "7" {
		t.Errorf("tier table burst = %q, want 7", got)
	}
	d := c.get("/docs", nil).doc(t)
	row := d.Find(`[data-testid="docs-limit"][data-policy="bucket-items"]`).First()
	if got := strings.TrimSpace(row.Find("td").Eq(4).Text()); got != "7" {
		t.Errorf("docs burst = %q, want 7", got)
	}
}

// TestTierEditKeepsWhatWasTyped: the inline edit, like the add form,
// refuses a window of 1.5 and a huge limit naming the field and shows them
// as typed.
func TestTierEditKeepsWhatWasTyped(t *testing.T) {
	e := newEnv(t)
	p := e.createPlan("gold", searchTier)
	c := e.signedIn(operatorEmail)
	edit := fmt.Sprintf("/admin/plans/%d/limits/%d", p.ID, p.Limits[0].ID)
	for _, tt := range []struct{ field, typed, input, want string }{
		{"limit", "99999999999999999999", "tier-input-limit", "is too large"},
		{"window_seconds", "1.5", "tier-input-window", "must be a whole number"},
		{"cost", "0", "tier-input-cost", "must be at least 1 (leave it blank for 1)"},
	} {
		t.Run(tt.field, func(t *testing.T) {
			form := tierForm(p.Version, "search", "GET /api/search", "token_bucket", "10", "60", "20", "1", "reject")
			form.Set(tt.field, tt.typed)
			res := c.post(edit, form, nil)
			if res.StatusCode != http.StatusUnprocessableEntity {
				t.Fatalf("status %d, want 422", res.StatusCode)
			}
			d := res.doc(t)
			if got := text(d, "error-"+tt.field); got != tt.want {
				t.Errorf("error-%s = %q, want %q", tt.field, got, tt.want)
			}
			if got, _ := d.Find(`[data-testid="tier-edit-row"] [data-testid="` + tt.input + `"]`).Attr("value"); got != tt.typed {
				t.Errorf("%s shows %q, want %q", tt.input, got, tt.typed)
			}
		})
	}
}

// TestTierFormCountPerAndDegrade: the tier form sets whose state a tier
// counts, and refuses degrade on a route with no reduced answer, naming
// the mode field and keeping the form.
func TestTierFormCountPerAndDegrade(t *testing.T) {
	e := newEnv(t)
	p := e.createPlan("team")
	c := e.signedIn(operatorEmail)
	add := fmt.Sprintf("/admin/plans/%d/limits", p.ID)

	form := tierForm(p.Version, "items", "GET /api/items/{id}", "fixed_window", "60", "60", "", "1", "degrade")
	res := c.post(add, form, nil)
	if res.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("degrade on items: status %d, want 422", res.StatusCode)
	}
	if got := fieldErrorsOf(res.doc(t))["mode"]; !strings.Contains(got, "has none") || !strings.Contains(got, "GET /api/search") {
		t.Errorf("mode error %q, want it to say items has no reduced answer and search has one", got)
	}

	form.Set("mode", "reject")
	form.Set("count_per", "developer")
	if res := c.post(add, form, nil); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("add with count_per developer: status %d", res.StatusCode)
	}
	got, err := e.plans.Get(context.Background(), p.ID)
	if err != nil || len(got.Limits) != 1 || got.Limits[0].CountPer != "developer" || got.Limits[0].Enforce("team").PerKey {
		t.Fatalf("saved %+v, %v", got.Limits, err)
	}
	page := c.get(fmt.Sprintf("/admin/plans/%d", p.ID), nil).doc(t)
	if got := text(page, "tier-count-per"); got != "per developer" {
		t.Errorf("table says %q, want per developer", got)
	}

	form.Set("version", strconv.Itoa(got.Version))
	form.Set("name", "other")
	form.Set("count_per", "team")
	res = c.post(add, form, nil)
	if res.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(fieldErrorsOf(res.doc(t))["count_per"], "key or developer") {
		t.Errorf("count_per team: status %d, errors %v", res.StatusCode, fieldErrorsOf(res.doc(t)))
	}
}

// TestArchivedPlanOfferedToNobodyNew: once archived, a plan leaves the
// sign-up choices and cannot be given to a key or developer not on it,
// while a key on it keeps it; restoring offers it again. Archiving the
// default plan is refused with the reason.
func TestArchivedPlanOfferedToNobodyNew(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	free, err := e.plans.Create(ctx, "test", plans.PlanInput{Slug: "free", Name: "Free", IsDefault: true, IsPublic: true})
	if err != nil {
		t.Fatal(err)
	}
	legacy := e.createPlan("legacy")
	c := e.signedIn(operatorEmail)
	k, _ := e.createKey(e.dev.ID, "k")
	if _, err := e.keys.SetPlan(ctx, "test", k.ID, &legacy.ID); err != nil {
		t.Fatal(err)
	}
	other, _ := e.createKey(e.dev.ID, "other")

	res := c.post(fmt.Sprintf("/admin/plans/%d/archive", free.ID), url.Values{"version": {strconv.Itoa(free.Version)}}, nil)
	if res.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(text(res.doc(t), "archive-refused"), "default plan") {
		t.Errorf("archive the default: status %d, %q", res.StatusCode, text(res.doc(t), "archive-refused"))
	}
	res = c.post(fmt.Sprintf("/admin/plans/%d/archive", legacy.ID), url.Values{"version": {strconv.Itoa(legacy.Version)}}, nil)
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("archive: status %d", res.StatusCode)
	}
	if strings.Contains(e.anonymous().get("/signup", nil).body, "LEGACY") {
		t.Error("sign-up still offers the archived plan")
	}
	id := strconv.FormatInt(legacy.ID, 10)
	res = c.post(fmt.Sprintf("/admin/keys/%d/plan", other.ID), url.Values{"plan_id": {id}}, nil)
	if res.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(text(res.doc(t), "error-plan_id"), "archived") {
		t.Errorf("give another key the archived plan: status %d, %q", res.StatusCode, text(res.doc(t), "error-plan_id"))
	}
	if res := c.post(fmt.Sprintf("/admin/keys/%d/plan", k.ID), url.Values{"plan_id": {id}}, nil); res.StatusCode != http.StatusSeeOther {
		t.Errorf("keep the key on its archived plan: status %d", res.StatusCode)
	}
	res = c.post(fmt.Sprintf("/admin/developers/%d/plan", e.dev.ID), url.Values{"plan_id": {id}, "version": {strconv.Itoa(e.dev.Version)}}, nil)
	if res.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(res.body, "archived") {
		t.Errorf("give the developer the archived plan: status %d", res.StatusCode)
	}
	kp := c.get(fmt.Sprintf("/admin/keys/%d", other.ID), nil).doc(t)
	if strings.Contains(kp.Find(`[data-testid="key-plan-select"]`).Text(), "LEGACY") {
		t.Error("another key's plan choices list the archived plan")
	}

	cur, _ := e.plans.Get(ctx, legacy.ID)
	if res := c.post(fmt.Sprintf("/admin/plans/%d/restore", legacy.ID), url.Values{"version": {strconv.Itoa(cur.Version)}}, nil); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("restore: status %d", res.StatusCode)
	}
	if !strings.Contains(e.anonymous().get("/signup", nil).body, "LEGACY") {
		t.Error("sign-up does not offer the restored plan")
	}
}

// TestUpgradeRequestHandlers: a developer's request names the field when
// the plan is not offered, a second one waits for the first, and an
// operator's decision with no decision named is refused.
func TestUpgradeRequestHandlers(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.plans.Create(ctx, "test", plans.PlanInput{Slug: "free", Name: "Free", IsDefault: true, IsPublic: true}); err != nil {
		t.Fatal(err)
	}
	pro := e.createPlan("pro")
	dev := e.signedIn(developerEmail)
	if res := dev.post("/app/plan", url.Values{"plan_id": {"abc"}}, nil); res.StatusCode != http.StatusUnprocessableEntity || fieldErrorsOf(res.doc(t))["plan_id"] == "" {
		t.Errorf("bad plan id: status %d, errors %v", res.StatusCode, fieldErrorsOf(res.doc(t)))
	}
	if res := dev.post("/app/plan", url.Values{"plan_id": {strconv.FormatInt(pro.ID, 10)}}, nil); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("request: status %d", res.StatusCode)
	}
	if res := dev.post("/app/plan", url.Values{"plan_id": {strconv.FormatInt(pro.ID, 10)}}, nil); res.StatusCode != http.StatusConflict || count(res.doc(t), "upgrade-pending") != 1 {
		t.Errorf("second request: status %d", res.StatusCode)
	}
	if res := dev.get("/admin/upgrades", nil); res.StatusCode != http.StatusForbidden {
		t.Errorf("developer reaches the operators' upgrades page: status %d", res.StatusCode)
	}
	op := e.signedIn(operatorEmail)
	pending, err := e.plans.UpgradeRequests(ctx, plans.UpgradePending, 10)
	if err != nil || len(pending) != 1 {
		t.Fatalf("pending = %v, %v", pending, err)
	}
	path := "/admin/upgrades/" + strconv.FormatInt(pending[0].ID, 10)
	if res := op.post(path, url.Values{"decision": {"maybe"}}, nil); res.StatusCode != http.StatusUnprocessableEntity {
		t.Errorf("decision maybe: status %d", res.StatusCode)
	}
	if res := op.post(path, url.Values{"decision": {"refuse"}, "note": {strings.Repeat("x", 501)}}, nil); res.StatusCode != http.StatusUnprocessableEntity ||
		!strings.Contains(text(res.doc(t), "upgrade-refused"), "note") {
		t.Errorf("long note: status %d", res.StatusCode)
	}
	if res := op.post(path, url.Values{"decision": {"refuse"}, "note": {"next quarter"}}, nil); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("refuse: status %d", res.StatusCode)
	}
	d := dev.get("/app/plan", nil).doc(t)
	if got := text(d, "upgrade-outcome"); !strings.HasPrefix(got, "refused") || !strings.Contains(d.Text(), "next quarter") {
		t.Errorf("developer sees outcome %q", got)
	}
}
