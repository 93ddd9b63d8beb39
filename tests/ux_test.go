package tests

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluicehq/sluice/internal/plans"
)

// TestTierEditFitsAt1280: editing a tier in its row at 1280 px keeps Save
// and Cancel inside the table's box (the row grew to 1,689 px in a box of
// 1,050 px, pushing them out of view).
func TestTierEditFitsAt1280(t *testing.T) {
	p := startPortal(t)
	pl, err := p.Plans.Create(t.Context(), "test", plans.PlanInput{Slug: "wide", Name: "Wide", IsPublic: true, Limits: []plans.LimitInput{
		{Name: "items", Route: "GET /api/items/{id}", Algorithm: "sliding_window_counter", Limit: 600, WindowSeconds: 60},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := browser(t, 60*time.Second)
	signIn(t, ctx, p.URL, operatorEmail)
	do(t, ctx, "edit the tier",
		chromedp.Navigate(fmt.Sprintf("%s/admin/plans/%d", p.URL, pl.ID)),
		chromedp.WaitVisible(tid("tier-edit")),
		htmxReady(),
		htmxBound(`[data-testid="tier-edit"]`),
		chromedp.Click(tid("tier-edit")),
		chromedp.WaitVisible(tid("tier-save")),
	)
	// htmx settles a swapped row a moment after it is visible; the layout
	// is read once it is bound, and again until it holds still.
	do(t, ctx, "row settled", htmxBound(`[data-testid="tier-edit-row"] form`))
	const measure = `(() => {
		const right = e => Math.round(e.getBoundingClientRect().right);
		const row = document.querySelector('[data-testid="tier-edit-row"]');
		return {save: right(row.querySelector('[data-testid="tier-save"]')),
			cancel: right(row.querySelector('[data-testid="tier-cancel"]')),
			box: right(row.closest('.scroll'))};
	})()`
	type box struct{ Save, Cancel, Box int }
	_, err = chromedp.Run(ctx, chromedp.Poll[bool](`(() => { const m = `+measure+`; return m.save <= m.box && m.cancel <= m.box; })()`,
		chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(5*time.Second)))
	screenshot(t, ctx, "tier-edit-1280")
	if err != nil {
		b, _ := chromedp.Run(ctx, chromedp.Evaluate[box](measure))
		t.Errorf("Save ends at %d px and Cancel at %d px, outside the table's box ending at %d px (%v)", b.Save, b.Cancel, b.Box, err)
	}
}

// TestPhoneNavigationAndIcon: at 390 px the operator's navigation takes at
// most two rows of the header (it took three), and the browser finds an
// icon without a 404.
func TestPhoneNavigationAndIcon(t *testing.T) {
	p := startPortal(t)
	ctx := browser(t, 60*time.Second)
	signIn(t, ctx, p.URL, operatorEmail)
	do(t, ctx, "phone width", chromedp.EmulateViewport(390, 844), chromedp.Navigate(p.URL+"/admin/plans"), chromedp.WaitVisible(tid("nav")))
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[int](`(() => {
		// Children whose boxes overlap vertically share a row.
		// Each navigation link counts on its own: a nav that wraps is one box
		// several rows tall.
		const boxes = [...document.querySelectorAll('header.top > .brand, header.top nav a, header.top > .who')]
			.map(e => e.getBoundingClientRect()).sort((a, b) => a.top - b.top);
		let rows = 0, bottom = -Infinity;
		for (const b of boxes) {
			if (b.top >= bottom) { rows++; bottom = b.bottom; } else { bottom = Math.max(bottom, b.bottom); }
		}
		return rows;
	})()`))
	if err != nil {
		t.Fatal(err)
	}
	screenshot(t, ctx, "nav-390")
	if rows > 2 {
		t.Errorf("the header takes %d rows at 390 px, want at most 2", rows)
	}
	overflow, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > window.innerWidth`))
	if err != nil || overflow {
		t.Errorf("the page scrolls sideways at 390 px (%v)", err)
	}
	res, err := http.Get(p.URL + "/favicon.ico")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "image/svg+xml" {
		t.Errorf("/favicon.ico: status %d, type %q (after redirects)", res.StatusCode, res.Header.Get("Content-Type"))
	}
}
