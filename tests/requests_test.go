package tests

import (
	"context"
	"encoding/csv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/requestlog"
	"github.com/sluicehq/sluice/internal/users"
)

// TestRequestLogInTheBrowser: a developer filters their own request log to
// the rejected calls and sees which layer fired and the Retry-After, and
// nothing of another developer's; the operator finds the other developer's
// call by email and downloads the rows as CSV. The rows are written
// through the request log's writer into the portal's database, as the
// engine's decision path writes them.
func TestRequestLogInTheBrowser(t *testing.T) {
	p := startPortal(t)
	ctx := context.Background()
	key, _ := p.keyOnPlan(t, "gold",
		plans.LimitInput{Name: "search", Route: "GET /api/search", Algorithm: "fixed_window", Limit: 5, WindowSeconds: 60})
	other, err := p.Users.Create(ctx, users.NewUser{Email: "other@example.com", Password: password, Role: users.RoleDeveloper})
	if err != nil {
		t.Fatal(err)
	}
	otherKey, _, err := p.Keys.Create(ctx, "test", apikeys.NewKey{UserID: other.ID, Name: "other's key"})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	w := requestlog.NewWriter(p.Pool, requestlog.Options{AdmitSample: 1})
	w.Log(requestlog.Entry{At: now.Add(-3 * time.Minute), WayIn: requestlog.WayMiddleware, Outcome: requestlog.Admitted,
		Plan: "gold", Route: "GET /api/search", UserID: p.Dev.ID, KeyID: key.ID, Status: 200, UpstreamStatus: 200, Latency: 8 * time.Millisecond})
	w.Log(requestlog.Entry{At: now.Add(-2 * time.Minute), WayIn: requestlog.WayMiddleware, Outcome: requestlog.Rejected,
		Plan: "gold", Route: "GET /api/search", UserID: p.Dev.ID, KeyID: key.ID, Layer: "gold-search", RetryAfter: 30 * time.Second, Status: 429})
	w.Log(requestlog.Entry{At: now.Add(-time.Minute), WayIn: requestlog.WayCheck, Outcome: requestlog.Rejected,
		Plan: "gold", Route: "GET /api/items/{id}", UserID: other.ID, KeyID: otherKey.ID, Layer: "gold-items", RetryAfter: 9 * time.Second, Status: 429})
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	dev := browser(t, 90*time.Second)
	signIn(t, dev, p.URL, devEmail)
	// The menu leads there; the page is then loaded whole, so no swap of
	// the menu's navigation can replace the form under the steps below.
	do(t, dev, "open my requests",
		chromedp.WaitVisible(`[data-testid="nav-app-requests"][href="/app/requests"]`),
		chromedp.Navigate(p.URL+"/app/requests"),
		chromedp.WaitVisible(tid("requests-table")),
		chromedp.SetValue(tid("requests-outcome"), "rejected"),
		chromedp.Click(tid("requests-show")),
		// The unfiltered table already shows the rejected call: wait for the
		// filter's answer, which has no admitted one, before reading rows.
		chromedp.WaitNotPresent(`[data-testid="request-row"][data-outcome="admitted"]`),
		chromedp.WaitVisible(`[data-testid="request-row"][data-outcome="rejected"]`),
	)
	rows, err := chromedp.Run(dev, chromedp.Evaluate[[]string](`[...document.querySelectorAll('[data-testid="request-row"]')].map(r =>
		["request-outcome", "request-route", "request-layer", "request-retry", "request-status"].map(id => r.querySelector('[data-testid="' + id + '"]').textContent.trim()).join("|"))`))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(rows, "\n") != "rejected|GET /api/search|gold-search|30 s|429" {
		t.Errorf("the developer's rejected calls: %q, want one by gold-search with Retry-After 30 s", rows)
	}
	page, err := chromedp.Run(dev, chromedp.Evaluate[string](`document.body.innerText`))
	if err != nil || strings.Contains(page, "other's key") || strings.Contains(page, "gold-items") {
		t.Errorf("the developer's page shows another developer's call (%v)", err)
	}
	screenshot(t, dev, "app-requests")
	// At phone width the page does not scroll sideways.
	do(t, dev, "phone width", chromedp.EmulateViewport(390, 844), chromedp.Reload(), chromedp.WaitVisible(tid("requests-table")))
	if overflow, err := chromedp.Run(dev, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > window.innerWidth`)); err != nil || overflow {
		t.Errorf("/app/requests scrolls sideways at 390 px (%v)", err)
	}
	screenshot(t, dev, "app-requests-390")

	op := browser(t, 90*time.Second)
	signIn(t, op, p.URL, operatorEmail)
	do(t, op, "search by developer",
		chromedp.Click(tid("nav-requests")),
		chromedp.WaitVisible(tid("requests-table")),
		chromedp.SendKeys(tid("requests-developer"), "other@example.com"),
		chromedp.Click(tid("requests-show")),
		// The unfiltered table shows the first developer's admitted call:
		// wait for the filter's answer, which has none, before reading.
		chromedp.WaitNotPresent(`[data-testid="request-row"][data-outcome="admitted"]`),
		chromedp.WaitVisible(tid("request-owner")),
	)
	if got := textOf(t, op, "request-owner"); got != "other@example.com" {
		t.Errorf("developer column %q", got)
	}
	if got := textOf(t, op, "request-layer"); got != "gold-items" {
		t.Errorf("layer %q, want gold-items", got)
	}
	if n, err := chromedp.Run(op, chromedp.Evaluate[int](`document.querySelectorAll('[data-testid="request-row"]').length`)); err != nil || n != 1 {
		t.Errorf("%d rows for the other developer (%v), want 1", n, err)
	}
	screenshot(t, op, "admin-requests")
	body, err := chromedp.Run(op, chromedp.Evaluate[string](`fetch(document.querySelector('[data-testid="requests-csv"]').href).then(r => r.text())`, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatal(err)
	}
	records, err := csv.NewReader(strings.NewReader(body)).ReadAll()
	if err != nil || len(records) != 2 || records[1][9] != "other@example.com" || records[1][1] != "check" {
		t.Errorf("CSV %q (%v), want a header and the other developer's call through /v1/check", records, err)
	}
}
