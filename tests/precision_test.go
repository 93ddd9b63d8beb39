package tests

import (
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/plans"
)

// TestDashboardTierPrecision: with PORTAL_INSTANCES=2 an operator adds a
// leased tier in the browser and its row states the worst case for two
// instances; a concurrency tier asked to be leased is refused beside the
// field with the rule, and nothing is saved.
func TestDashboardTierPrecision(t *testing.T) {
	p := startPortalWith(t, portalConfig{env: map[string]string{"PORTAL_INSTANCES": "2"}})
	plan, err := p.Plans.Create(t.Context(), "test", plans.PlanInput{Slug: "team", Name: "Team", IsPublic: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := browser(t, 90*time.Second)
	signIn(t, ctx, p.URL, operatorEmail)

	addTier := func(name, algorithm, limit, precision string) {
		t.Helper()
		do(t, ctx, "add tier "+name,
			htmxBound(`#tier-add`),
			chromedp.SetValue(chromedp.CSS(`#tier-add [name="name"]`), name),
			chromedp.SetValue(chromedp.CSS(`#tier-add [name="route"]`), "GET /api/items/{id}"),
			chromedp.SetValue(chromedp.CSS(`#tier-add [name="algorithm"]`), algorithm),
			chromedp.SetValue(chromedp.CSS(`#tier-add [name="limit"]`), limit),
			chromedp.SetValue(chromedp.CSS(`#tier-add [name="window_seconds"]`), "60"),
			chromedp.SetValue(chromedp.CSS(`#tier-add [name="precision"]`), precision),
			chromedp.Click(tid("tier-add")),
		)
	}
	do(t, ctx, "open plan",
		chromedp.Navigate(fmt.Sprintf("%s/admin/plans/%d", p.URL, plan.ID)),
		chromedp.WaitVisible(tid("tier-add-form")),
	)
	addTier("items", "sliding_window_log", "2000", "leased")
	do(t, ctx, "leased row", chromedp.WaitVisible(chromedp.CSS(`[data-testid="tier-row"][data-tier="items"] [data-precision="leased"]`)))
	const bound = "leased: at most 40 over, at most 40 under the limit per window with 2 instances; leases of up to 20"
	if got := textOf(t, ctx, "tier-precision"); got != bound {
		t.Errorf("the row says %q, want %q", got, bound)
	}
	screenshot(t, ctx, "tier-precision-leased")

	addTier("inflight", "concurrency", "5", "leased")
	do(t, ctx, "precision error", chromedp.WaitVisible(chromedp.CSS(`#tier-add [data-testid="error-precision"]`)))
	if got := textOf(t, ctx, "error-precision"); got != "a concurrency limit is always exact" {
		t.Errorf("precision error %q", got)
	}
	screenshot(t, ctx, "tier-precision-refused")

	saved, err := p.Plans.GetBySlug(t.Context(), "team")
	if err != nil {
		t.Fatal(err)
	}
	if len(saved.Limits) != 1 || saved.Limits[0].Name != "items" || saved.Limits[0].Precision != enforce.PrecisionLeased {
		t.Errorf("saved tiers %+v, want items alone, leased", saved.Limits)
	}
}
