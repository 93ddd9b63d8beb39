package tests

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluicehq/sluice/internal/plans"
)

// TestQuotaGrantInBrowser: an operator opens a developer's page, sees the
// quota spent by real API calls, grants units through the form (htmx) and
// sees the remaining go up, with a note of what happened.
func TestQuotaGrantInBrowser(t *testing.T) {
	p := startPortal(t)
	ctx := context.Background()
	k, secret := p.keyOnPlan(t, "metered", plans.LimitInput{Name: "monthly", Algorithm: "quota", Period: "month", Limit: 50})
	// The quota's subject is the developer's account: put the account on
	// the key's plan too, so the page's quotas are the ones the key spends.
	if _, err := p.Users.SetPlan(ctx, p.Dev.ID, k.PlanID, p.Dev.Version); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if code := apiStatus(t, p.URL, "/api/items/1", secret); code != http.StatusOK {
			t.Fatalf("API call: status %d", code)
		}
	}
	b := browser(t, 90*time.Second)
	signIn(t, b, p.URL, operatorEmail)
	page := fmt.Sprintf("%s/admin/developers/%d", p.URL, p.Dev.ID)
	remaining := `[data-testid="quota-row"][data-quota="monthly"] [data-testid="quota-remaining"]`
	do(t, b, "developer page", chromedp.Navigate(page), chromedp.WaitVisible(remaining), htmxReady())
	if got, err := readText(b, remaining); err != nil || got != "47" {
		t.Fatalf("remaining before the grant = %q (%v), want 47 (50 less 3 calls)", got, err)
	}
	form := `[data-quota="monthly"] [data-testid="quota-grant-form"]`
	do(t, b, "grant", htmxBound(form),
		chromedp.SendKeys(form+` [data-testid="quota-grant-units"]`, "10"),
		chromedp.Click(form+` [data-testid="quota-grant"]`),
		chromedp.WaitVisible(tid("saved")))
	if got := textOf(t, b, "saved"); !strings.HasPrefix(got, "Granted 10 units of monthly") {
		t.Errorf("message = %q", got)
	}
	if got, err := readText(b, remaining); err != nil || got != "57" {
		t.Errorf("remaining after granting 10 = %q (%v), want 57", got, err)
	}
	used := `[data-testid="quota-row"][data-quota="monthly"] [data-testid="quota-used"]`
	if got, err := readText(b, used); err != nil || got != "3" {
		t.Errorf("used after the grant = %q (%v), want still 3", got, err)
	}
	screenshot(t, b, "quota-grant")
}
