package tests

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/sluicehq/sluice/internal/plans"
)

// TestDashboardPlanWithTiers: an operator signs in, creates a plan, adds two
// tiers, is told a limit of 0 is wrong beside the field, and edits a tier in
// place without leaving the page.
func TestDashboardPlanWithTiers(t *testing.T) {
	p := startPortal(t)
	ctx := browser(t, 90*time.Second)
	signIn(t, ctx, p.URL, operatorEmail)

	do(t, ctx, "create plan",
		chromedp.Navigate(p.URL+"/admin/plans/new"),
		chromedp.WaitVisible(tid("plan-form")),
		chromedp.SendKeys(tid("plan-slug"), "team"),
		chromedp.SendKeys(tid("plan-name-input"), "Team"),
		chromedp.Click(tid("plan-submit")),
		chromedp.WaitVisible(tid("tier-add-form")),
	)
	if got := textOf(t, ctx, "plan-title"); got != "Team (team)" {
		t.Fatalf("plan page title %q", got)
	}
	// A marker that survives only as long as the page is not reloaded: the
	// inline edits below must keep it.
	do(t, ctx, "mark page", htmxReady(), chromedp.Evaluate[chromedp.Void](`window.sluiceMarker = "still here"`))

	addTier := func(name, route, algorithm, limit, window, burst string) {
		t.Helper()
		do(t, ctx, "add tier "+name,
			htmxBound(`#tier-add`),
			chromedp.SetValue(chromedp.CSS(`#tier-add [name="name"]`), name),
			chromedp.SetValue(chromedp.CSS(`#tier-add [name="route"]`), route),
			chromedp.SetValue(chromedp.CSS(`#tier-add [name="algorithm"]`), algorithm),
			chromedp.SetValue(chromedp.CSS(`#tier-add [name="limit"]`), limit),
			chromedp.SetValue(chromedp.CSS(`#tier-add [name="window_seconds"]`), window),
			chromedp.SetValue(chromedp.CSS(`#tier-add [name="burst"]`), burst),
			chromedp.Click(tid("tier-add")),
		)
	}
	addTier("search", "GET /api/search", "token_bucket", "100", "60", "20")
	do(t, ctx, "first tier row", chromedp.WaitVisible(chromedp.CSS(`[data-testid="tier-row"][data-tier="search"]`)))
	addTier("items", "GET /api/items/{id}", "sliding_window_log", "600", "60", "0")
	do(t, ctx, "second tier row", chromedp.WaitVisible(chromedp.CSS(`[data-testid="tier-row"][data-tier="items"]`)))

	addTier("zero", "", "fixed_window", "0", "60", "0")
	do(t, ctx, "field error", chromedp.WaitVisible(chromedp.CSS(`#tier-add [data-testid="error-limit"]`)))
	if got := textOf(t, ctx, "error-limit"); got != "must be at least 1" {
		t.Errorf("limit error %q", got)
	}
	screenshot(t, ctx, "field-error")

	do(t, ctx, "edit tier inline",
		htmxBound(`[data-tier="search"] [data-testid="tier-edit"]`),
		chromedp.Click(chromedp.CSS(`[data-tier="search"] [data-testid="tier-edit"]`)),
		chromedp.WaitVisible(tid("tier-edit-row")),
		htmxBound(`[data-testid="tier-edit-row"] form`),
		chromedp.SetValue(chromedp.CSS(`[data-testid="tier-edit-row"] [name="limit"]`), "250"),
		chromedp.Click(tid("tier-save")),
		chromedp.WaitNotPresent(tid("tier-edit-row")),
	)
	if got := textOf(t, ctx, "tier-limit"); got != "250" {
		t.Errorf("edited row shows limit %q, want 250", got)
	}
	marker, err := chromedp.Run(ctx, chromedp.Evaluate[string](`window.sluiceMarker || ""`))
	if err != nil || marker != "still here" {
		t.Errorf("the page reloaded during the inline edits (marker %q, %v)", marker, err)
	}
	screenshot(t, ctx, "plan-with-tiers")

	// On a phone the page must not scroll sideways: tables stack their
	// cells instead.
	do(t, ctx, "phone width", chromedp.EmulateViewport(390, 844), chromedp.Navigate(p.URL+"/admin/plans"), chromedp.WaitVisible(tid("plans-table")))
	overflow, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > window.innerWidth`))
	if err != nil || overflow {
		t.Errorf("the plans list scrolls sideways at 390 px (%v)", err)
	}
	screenshot(t, ctx, "plans-phone")

	saved, err := p.Plans.GetBySlug(t.Context(), "team")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, l := range saved.Limits {
		got[l.Name] = l.Limit
	}
	if fmt.Sprint(got) != fmt.Sprint(map[string]int64{"search": 250, "items": 600}) {
		t.Errorf("saved tiers %v", got)
	}
	if saved.Version != 4 {
		t.Errorf("plan version %d, want 4 (created, two adds, one edit)", saved.Version)
	}
}

// TestDashboardRevokeKey: revoking a key in the dashboard makes the sample
// API refuse it within a second.
func TestDashboardRevokeKey(t *testing.T) {
	p := startPortal(t)
	k, secret := p.keyOnPlan(t, "gold", plans.LimitInput{Name: "all", Algorithm: "token_bucket", Limit: 1000, WindowSeconds: 60})
	if _, ok := eventually(2*time.Second, func() bool { return apiStatus(t, p.URL, "/api/items/1", secret) == http.StatusOK }); !ok {
		t.Fatal("the new key was not accepted by the sample API within 2 s")
	}
	ctx := browser(t, 60*time.Second)
	signIn(t, ctx, p.URL, operatorEmail)
	do(t, ctx, "open key",
		chromedp.Navigate(p.URL+"/admin/keys?q="+k.Prefix),
		chromedp.WaitVisible(tid("key-prefix")),
		chromedp.Click(tid("key-prefix")),
		chromedp.WaitVisible(tid("key-revoke")),
		chromedp.Click(tid("key-revoke")),
		chromedp.WaitVisible(tid("revoke-warning")),
	)
	screenshot(t, ctx, "revoke-confirmation")
	do(t, ctx, "confirm", chromedp.Click(tid("revoke-confirm")), chromedp.WaitVisible(tid("saved")))
	took, ok := eventually(time.Second, func() bool { return apiStatus(t, p.URL, "/api/items/1", secret) == http.StatusUnauthorized })
	if !ok {
		t.Fatalf("the sample API still accepted the revoked key %v after the revocation", took)
	}
	t.Logf("revoked key refused %v after the confirmation page returned", took)
	if got := textOf(t, ctx, "key-state"); got != "revoked" {
		t.Errorf("key page state %q", got)
	}
	screenshot(t, ctx, "revoked")
}

// TestDashboardLiveView: the live view of a key moves while a client sends
// traffic, without reloading.
func TestDashboardLiveView(t *testing.T) {
	p := startPortal(t)
	k, secret := p.keyOnPlan(t, "gold",
		// A sliding log, not a fixed window: the count watched must not
		// reset when a window ends mid-test.
		plans.LimitInput{Name: "items", Route: "GET /api/items/{id}", Algorithm: "sliding_window_log", Limit: 50, WindowSeconds: 3600})
	if _, ok := eventually(2*time.Second, func() bool { return apiStatus(t, p.URL, "/api/items/1", secret) == http.StatusOK }); !ok {
		t.Fatal("the new key was not accepted by the sample API within 2 s")
	}
	ctx := browser(t, 60*time.Second)
	signIn(t, ctx, p.URL, operatorEmail)
	do(t, ctx, "open live view",
		chromedp.Navigate(p.URL+"/admin/live?keys="+strconv.FormatInt(k.ID, 10)),
		chromedp.WaitVisible(tid("live-used")),
		htmxReady(),
		chromedp.Evaluate[chromedp.Void](`window.sluiceMarker = "still here"`),
	)
	before, _ := strconv.Atoi(textOf(t, ctx, "live-used"))
	beforeAdmitted, _ := strconv.Atoi(textOf(t, ctx, "live-admitted"))

	const sent = 7
	for range sent {
		if s := apiStatus(t, p.URL, "/api/items/2", secret); s != http.StatusOK {
			t.Fatalf("traffic: status %d", s)
		}
	}
	// The portal keeps its counters under this test's prefix
	// (PORTAL_REDIS_PREFIX), apart from every other test's.
	if n := p.countersUnderPrefix(t); n == 0 {
		t.Errorf("no Redis keys under %s after the traffic", p.Prefix)
	}
	// The stream pushes every second; the wait is for that event, bounded
	// generously for a loaded machine, never a measure of its speed.
	want := strconv.Itoa(before + sent)
	expr := fmt.Sprintf(`((document.querySelector('[data-testid="live-used"]')||{}).textContent||"").trim() === %q`, want)
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		screenshot(t, ctx, "failed-live")
		t.Fatalf("used counter did not reach %s within 20 s (shows %q): %v", want, textOf(t, ctx, "live-used"), err)
	}
	if got, _ := strconv.Atoi(textOf(t, ctx, "live-admitted")); got < beforeAdmitted+sent {
		t.Errorf("admitted in the last hour %d, want at least %d", got, beforeAdmitted+sent)
	}
	marker, err := chromedp.Run(ctx, chromedp.Evaluate[string](`window.sluiceMarker || ""`))
	if err != nil || marker != "still here" {
		t.Errorf("the live view reloaded the page (marker %q, %v)", marker, err)
	}
	screenshot(t, ctx, "live-view")
}

// TestDashboardFirstLoadBytes measures the JavaScript and CSS a first page
// load fetches (compressed bytes on the wire, from the browser's resource
// timing), and checks the next page takes them from the cache.
func TestDashboardFirstLoadBytes(t *testing.T) {
	p := startPortal(t)
	ctx := browser(t, 60*time.Second)
	type resource struct {
		Name    string  `json:"name"`
		Kind    string  `json:"kind"`
		Encoded float64 `json:"encoded"`
		Decoded float64 `json:"decoded"`
		Wire    float64 `json:"wire"`
	}
	const read = `performance.getEntriesByType('resource')
		.filter(e => e.initiatorType === 'script' || e.initiatorType === 'link')
		.map(e => ({name: e.name, kind: e.initiatorType, encoded: e.encodedBodySize, decoded: e.decodedBodySize, wire: e.transferSize}))`
	do(t, ctx, "first load", chromedp.Navigate(p.URL+"/signin"), chromedp.WaitVisible(tid("signin-form")))
	first, err := chromedp.Run(ctx, chromedp.Evaluate[[]resource](read))
	if err != nil {
		t.Fatal(err)
	}
	var encoded, decoded float64
	for _, r := range first {
		encoded += r.Encoded
		decoded += r.Decoded
		if r.Wire == 0 {
			t.Errorf("%s came from a cache on the first load", r.Name)
		}
	}
	if len(first) != 3 {
		t.Fatalf("first load fetched %d scripts and stylesheets, want 3 (htmx, the CSS and sluice's own script): %+v", len(first), first)
	}
	t.Logf("first page load: JS+CSS %.0f bytes compressed (%.0f uncompressed) in %d files", encoded, decoded, len(first))
	if encoded > 24*1024 {
		t.Errorf("first load fetches %.0f bytes of JS+CSS, over the 24 KiB budget", encoded)
	}
	signIn(t, ctx, p.URL, operatorEmail)
	next, err := chromedp.Run(ctx, chromedp.Evaluate[[]resource](read))
	if err != nil {
		t.Fatal(err)
	}
	if len(next) != 3 {
		t.Fatalf("next page used %d scripts and stylesheets, want 3: %+v", len(next), next)
	}
	for _, r := range next {
		if r.Wire != 0 {
			t.Errorf("%s fetched again (%.0f bytes) on the next page", r.Name, r.Wire)
		}
	}
}

// TestDashboardOverviewDark: the usage overview counts a client's traffic and
// follows the system's dark colour scheme.
func TestDashboardOverviewDark(t *testing.T) {
	p := startPortal(t)
	k, secret := p.keyOnPlan(t, "gold",
		// A sliding log: a fixed window ending mid-test would admit more.
		plans.LimitInput{Name: "items", Route: "GET /api/items/{id}", Algorithm: "sliding_window_log", Limit: 5, WindowSeconds: 3600})
	ctx := browser(t, 60*time.Second)
	do(t, ctx, "dark scheme", chromedp.Action[chromedp.Void](func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		_, err := cdp.Call(ctx, tg, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}}})
		return chromedp.Void{}, err
	}))
	// Land somewhere that does not compute the (cached) usage summary yet.
	signInTo(t, ctx, p.URL, operatorEmail, "/admin/audit")

	admitted, rejected := 0, 0
	for range 8 {
		switch s := apiStatus(t, p.URL, "/api/items/3", secret); s {
		case http.StatusOK:
			admitted++
		case http.StatusTooManyRequests:
			rejected++
		default:
			t.Fatalf("traffic: status %d", s)
		}
	}
	if admitted != 5 || rejected != 3 {
		t.Fatalf("traffic admitted %d rejected %d, want 5 and 3", admitted, rejected)
	}
	// The overview lists keys used in the last hour; the key's last use
	// reaches Postgres in the portal's next batch (every second here:
	// PORTAL_LAST_USED_INTERVAL=1s).
	if _, ok := eventually(5*time.Second, func() bool {
		var used bool
		err := p.Pool.QueryRow(context.Background(), `SELECT last_used_at IS NOT NULL FROM api_keys WHERE id = $1`, k.ID).Scan(&used)
		return err == nil && used
	}); !ok {
		t.Fatal("the key's last use was not recorded within 5 s")
	}
	do(t, ctx, "open overview", chromedp.Navigate(p.URL+"/admin"), chromedp.WaitVisible(tid("overview")))
	if got := [2]string{textOf(t, ctx, "total-admitted"), textOf(t, ctx, "total-rejected")}; got != [2]string{"5", "3"} {
		t.Fatalf("overview shows admitted/rejected %q, want 5 and 3", got)
	}
	// The consumer is the developer: all their keys share one subject.
	if got := textOf(t, ctx, "consumer-row"); !strings.Contains(got, devEmail) {
		t.Errorf("top consumer %q", got)
	}
	bg, err := chromedp.Run(ctx, chromedp.Evaluate[string](`getComputedStyle(document.body).backgroundColor`))
	if err != nil || bg != "rgb(13, 17, 23)" {
		t.Errorf("body background %q (%v), want the dark scheme's rgb(13, 17, 23)", bg, err)
	}
	screenshot(t, ctx, "overview-dark")
}
