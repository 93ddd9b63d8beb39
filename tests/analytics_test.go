package tests

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluicehq/sluice/internal/analytics"
	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/history"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/requestlog"
	"github.com/sluicehq/sluice/internal/users"
)

// TestAnalyticsInTheBrowser: the operator's analytics chart the decisions
// logged for two developers (routes, status classes, consumers, latency),
// rank the rejected consumer, and show how close the busiest key runs to
// its limits, read from the portal's own counters after real calls; the
// developer's analytics show their own figures only. The decisions are
// logged through the request log's writer and the analytics rollup into
// the portal's database, as the engine's hook will.
func TestAnalyticsInTheBrowser(t *testing.T) {
	// The portal's own history of the real calls below is not flushed
	// during the test: the figures are the logged decisions'.
	p := startPortalWith(t, portalConfig{env: map[string]string{"PORTAL_HISTORY_FLUSH_INTERVAL": "5m"}})
	ctx := context.Background()
	key, secret := p.keyOnPlan(t, "gold",
		plans.LimitInput{Name: "search", Route: "GET /api/search", Algorithm: "fixed_window", Limit: 5, WindowSeconds: 3600})
	// Three real calls: the key's search tier is 3 of 5 used.
	for range 3 {
		if s := apiStatus(t, p.URL, "/api/search?q=a", secret); s != http.StatusOK {
			t.Fatalf("search: %d", s)
		}
	}
	other, err := p.Users.Create(ctx, users.NewUser{Email: "other@example.com", Password: password, Role: users.RoleDeveloper})
	if err != nil {
		t.Fatal(err)
	}
	otherKey, _, err := p.Keys.Create(ctx, "test", apikeys.NewKey{UserID: other.ID, Name: "other's key"})
	if err != nil {
		t.Fatal(err)
	}
	rollup := analytics.NewRollup(p.Pool, analytics.Options{})
	w := requestlog.NewWriter(p.Pool, requestlog.Options{AdmitSample: 1, Observer: rollup})
	hist := history.NewRecorder(p.Pool, history.Options{})
	now := time.Now().UTC()
	decide := func(k apikeys.Key, route string, n int, o requestlog.Outcome, status int) {
		for range n {
			e := requestlog.Entry{At: now, WayIn: requestlog.WayMiddleware, Outcome: o, Plan: "gold", Route: route,
				KeyID: k.ID, UserID: k.UserID, Status: status}
			if o == requestlog.Rejected {
				e.Layer, e.RetryAfter = "gold-search", time.Minute
			} else {
				e.UpstreamStatus, e.Latency = status, 30*time.Millisecond
			}
			w.Log(e)
			hist.RecordDecision(enforce.Caller{Plan: "gold", KeyID: k.ID, UserID: k.UserID}, route, 1, o != requestlog.Rejected)
		}
	}
	decide(key, "GET /api/search", 12, requestlog.Admitted, 200)
	decide(key, "GET /api/items/{id}", 4, requestlog.Admitted, 503)
	decide(otherKey, "GET /api/search", 6, requestlog.Rejected, 429)
	for _, f := range []func(context.Context) error{w.Flush, rollup.Flush, hist.Flush} {
		if err := f(ctx); err != nil {
			t.Fatal(err)
		}
	}

	op := browser(t, 90*time.Second)
	signIn(t, op, p.URL, operatorEmail)
	do(t, op, "open analytics", chromedp.Click(tid("nav-analytics")), chromedp.WaitVisible(tid("analytics-by-route")))
	for id, want := range map[string]string{"analytics-requests": "22", "analytics-rejected": "6"} {
		if got := textOf(t, op, id); got != want {
			t.Errorf("%s = %q, want %q", id, got, want)
		}
	}
	charts, err := chromedp.Run(op, chromedp.Evaluate[string](`["analytics-by-route", "analytics-by-class", "analytics-by-consumer"].map(id => {
		const c = document.querySelector('[data-testid="' + id + '"]');
		return c.dataset.series + ":" + [...c.querySelectorAll("path")].filter(p => p.getAttribute("d") !== "").length;
	}).join(" ")`))
	if err != nil || charts != "2:2 3:3 3:2" {
		// routes: search, items; classes: 2xx, 5xx, 429; consumers: two
		// keys and "other" (nobody else, so no bars).
		t.Errorf("series:bars drawn per chart %q (%v), want 2:2 3:3 3:2", charts, err)
	}
	if got := textOf(t, op, "analytics-rejected-top-row"); !strings.HasPrefix(got, "other's key (other@example.com)") {
		t.Errorf("top rejected %q", got)
	}
	if got := textOf(t, op, "analytics-headroom-key"); got != "e2e key ("+devEmail+")" {
		t.Errorf("headroom's busiest key %q", got)
	}
	if got := textOf(t, op, "analytics-headroom-tier"); got != "gold-search 60 %" {
		t.Errorf("headroom %q, want gold-search 60 %% (3 real calls of 5)", got)
	}
	screenshot(t, op, "admin-analytics")
	do(t, op, "phone width", chromedp.EmulateViewport(390, 844), chromedp.Reload(), chromedp.WaitVisible(tid("analytics-by-route")))
	if overflow, err := chromedp.Run(op, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > window.innerWidth`)); err != nil || overflow {
		t.Errorf("/admin/analytics scrolls sideways at 390 px (%v)", err)
	}

	dev := browser(t, 90*time.Second)
	signIn(t, dev, p.URL, devEmail)
	do(t, dev, "open my analytics", chromedp.Click(tid("nav-app-analytics")), chromedp.WaitVisible(tid("analytics-by-route")))
	if got := textOf(t, dev, "analytics-requests"); got != "16" {
		t.Errorf("the developer's requests %q, want their own 16", got)
	}
	if got := textOf(t, dev, "analytics-latency"); got != "30 ms / 30 ms / 30 ms" {
		t.Errorf("the developer's latency %q, want 30 ms (read from their logged rows)", got)
	}
	page, err := chromedp.Run(dev, chromedp.Evaluate[string](`document.body.innerText`))
	if err != nil || strings.Contains(page, "other's key") || strings.Contains(page, "other@example.com") {
		t.Errorf("the developer's analytics show another developer (%v)", err)
	}
	screenshot(t, dev, "app-analytics")
}
