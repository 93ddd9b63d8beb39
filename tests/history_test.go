package tests

import (
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluicehq/sluice/internal/plans"
)

// statusOf calls the sample API, with a key when secret is set, from addr
// (X-Forwarded-For is not trusted here, so every anonymous call is
// 127.0.0.1).
func statusOf(t *testing.T, base, path, secret string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+path, nil)
	if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode
}

// metricValue reads one sample of the portal's /metrics (at metricsURL).
func metricValue(t *testing.T, metricsURL, sample string) int {
	t.Helper()
	res, err := http.Get(metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(sample) + ` (\d+)$`).FindSubmatch(b)
	if m == nil {
		t.Logf("no %s in /metrics; its shadow lines: %q", sample, regexp.MustCompile(`(?m)^sluice_shadow.*$`).FindAll(b, -1))
		return 0
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// TestUsageHistoryInTheBrowser: traffic of a key and of anonymous callers
// appears in the operator's per-minute chart and CSV, in the developer's
// own history, anonymous traffic on the overview, and the developer a
// shadow tier would have rejected on the plan's page, as often as the
// metric says.
func TestUsageHistoryInTheBrowser(t *testing.T) {
	p := startPortalWith(t, portalConfig{env: map[string]string{"PORTAL_HISTORY_FLUSH_INTERVAL": "1s"}})
	ctx := context.Background()
	if _, err := p.Plans.Create(ctx, "test", plans.PlanInput{Slug: "anon", Name: "Anonymous", IsAnonymous: true, Limits: []plans.LimitInput{
		{Name: "anon-search", Route: "GET /api/search", Algorithm: "fixed_window", Limit: 2, WindowSeconds: 3600},
	}}); err != nil {
		t.Fatal(err)
	}
	key, secret := p.keyOnPlan(t, "hist",
		plans.LimitInput{Name: "search", Route: "GET /api/search", Algorithm: "fixed_window", Limit: 5, WindowSeconds: 3600},
		plans.LimitInput{Name: "trial", Route: "GET /api/search", Algorithm: "fixed_window", Mode: "shadow", Limit: 1, WindowSeconds: 7200},
	)
	var admitted, rejected int
	for range 8 {
		switch s := statusOf(t, p.URL, "/api/search?q=a", secret); s {
		case http.StatusOK:
			admitted++
		case http.StatusTooManyRequests:
			rejected++
		default:
			t.Fatalf("keyed search: status %d", s)
		}
	}
	var anonAdmitted, anonRejected int
	for range 5 {
		switch s := statusOf(t, p.URL, "/api/search?q=a", ""); s {
		case http.StatusOK:
			anonAdmitted++
		case http.StatusTooManyRequests:
			anonRejected++
		default:
			t.Fatalf("anonymous search: status %d", s)
		}
	}
	if admitted != 5 || rejected != 3 || anonAdmitted != 2 || anonRejected != 3 {
		t.Fatalf("keyed %d/%d, anonymous %d/%d admitted/rejected, want 5/3 and 2/3", admitted, rejected, anonAdmitted, anonRejected)
	}
	shadow := metricValue(t, p.MetricsURL, `sluice_shadow_rejections_total{plan="hist",tier="hist-trial"}`)
	if shadow < 4 {
		t.Fatalf("sluice_shadow_rejections_total = %d, want at least the 4 admitted requests past the first", shadow)
	}

	b := browser(t, 120*time.Second)
	signIn(t, b, p.URL, operatorEmail)
	keyID := strconv.FormatInt(key.ID, 10)
	// The recorder flushes every second: reload until the figures arrive.
	waitText := func(path, id, want string) {
		t.Helper()
		var got string
		_, ok := eventually(15*time.Second, func() bool {
			if err := chromedp.Do(b, chromedp.Navigate(p.URL+path), chromedp.WaitVisible(tid(id))); err != nil {
				return false
			}
			got, _ = readText(b, `[data-testid="`+id+`"]`)
			if got == want {
				return true
			}
			time.Sleep(300 * time.Millisecond)
			return false
		})
		if !ok {
			t.Fatalf("%s: %s shows %q, want %q", path, id, got, want)
		}
	}
	waitText("/admin/history?range=1h&key="+keyID, "history-admitted", "5")
	if got := textOf(t, b, "history-rejected"); got != "3" {
		t.Errorf("history rejected %q, want 3", got)
	}
	peak, err := chromedp.Run(b, chromedp.Evaluate[string](`document.querySelector('[data-testid="history-chart"]').dataset.peak + "/" +
		document.querySelector('[data-testid="history-chart"]').dataset.buckets + "/" +
		(document.querySelector('[data-testid="history-admitted-bars"]').getAttribute("d") !== "")`))
	if err != nil || peak != "8/60/true" {
		t.Errorf("chart peak/buckets/bars = %q (%v), want 8 requests in one of 60 minutes, bars drawn", peak, err)
	}
	screenshot(t, b, "history-chart")

	body, err := chromedp.Run(b, chromedp.Evaluate[string](`fetch("/admin/history.csv?range=1h&key=`+keyID+`").then(r => r.text())`, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(strings.NewReader(body)).ReadAll()
	if err != nil || len(rows) < 2 {
		t.Fatalf("CSV %q (%v), want a header and rows", body, err)
	}
	var csvAdmitted, csvRejected int
	for _, r := range rows[1:] {
		if r[1] != "hist" || r[2] != "GET /api/search" || r[3] != keyID || r[6] != devEmail {
			t.Errorf("CSV row %q, want plan hist, the search route, key %s of %s", r, keyID, devEmail)
		}
		a, _ := strconv.Atoi(r[8])
		rj, _ := strconv.Atoi(r[9])
		csvAdmitted, csvRejected = csvAdmitted+a, csvRejected+rj
	}
	if csvAdmitted != 5 || csvRejected != 3 {
		t.Errorf("CSV sums %d admitted, %d rejected, want 5 and 3", csvAdmitted, csvRejected)
	}

	waitText("/admin", "anonymous-admitted", "2")
	if got := textOf(t, b, "anonymous-rejected"); got != "3" {
		t.Errorf("overview anonymous rejected %q, want 3", got)
	}
	if got := textOf(t, b, "anonymous-card"); got != "2 / 3" {
		t.Errorf("overview anonymous card %q, want 2 / 3", got)
	}
	if got := textOf(t, b, "anonymous-blocks"); !strings.Contains(got, "127.0.0.0/24") {
		t.Errorf("anonymous blocks %q, want 127.0.0.0/24", got)
	}
	screenshot(t, b, "overview-anonymous")

	pl, err := p.Plans.GetBySlug(ctx, "hist")
	if err != nil {
		t.Fatal(err)
	}
	waitText("/admin/plans/"+strconv.FormatInt(pl.ID, 10), "shadow-day", strconv.Itoa(shadow))
	if got := textOf(t, b, "shadow-tier"); got != "trial" {
		t.Errorf("shadow tier %q, want trial", got)
	}
	if got := textOf(t, b, "shadow-caller"); got != "e2e key ("+devEmail+")" {
		t.Errorf("shadow caller %q, want the key and %s", got, devEmail)
	}
	if got := textOf(t, b, "shadow-hour"); got != strconv.Itoa(shadow) {
		t.Errorf("shadow last hour %q, want %d (the metric)", got, shadow)
	}
	screenshot(t, b, "plan-shadow")

	// The developer sees their own history.
	dev := browser(t, 60*time.Second)
	signIn(t, dev, p.URL, devEmail)
	do(t, dev, "own history", chromedp.Navigate(p.URL+"/app/history?range=1h"), chromedp.WaitVisible(tid("history-chart")))
	if a, r := textOf(t, dev, "history-admitted"), textOf(t, dev, "history-rejected"); a != "5" || r != "3" {
		t.Errorf("the developer's history shows %s admitted, %s rejected, want 5 and 3", a, r)
	}
	// At phone width the page does not scroll sideways.
	for _, path := range []string{"/app/history?range=1h"} {
		do(t, dev, "phone width", chromedp.EmulateViewport(390, 844), chromedp.Navigate(p.URL+path), chromedp.WaitVisible(tid("history-chart")))
		overflow, err := chromedp.Run(dev, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > window.innerWidth`))
		if err != nil || overflow {
			t.Errorf("%s scrolls sideways at 390 px (%v)", path, err)
		}
		screenshot(t, dev, "history-390")
	}
	do(t, b, "operator at phone width", chromedp.EmulateViewport(390, 844), chromedp.Navigate(p.URL+"/admin/history?range=1h"), chromedp.WaitVisible(tid("history-chart")))
	if overflow, err := chromedp.Run(b, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > window.innerWidth`)); err != nil || overflow {
		t.Errorf("/admin/history scrolls sideways at 390 px (%v)", err)
	}
	screenshot(t, b, "admin-history-390")

	// The breakdown tables (by plan, route, developer, key, address) never
	// overlap each other, nor run out of their column, at desktop and
	// phone widths; keyed traffic is not counted as anonymous.
	for _, width := range []int64{1280, 390} {
		do(t, b, fmt.Sprintf("history at %d px", width), chromedp.EmulateViewport(width, 900),
			chromedp.Navigate(p.URL+"/admin/history?range=1h"), chromedp.WaitVisible(tid("history-by-key")))
		overlaps, err := chromedp.Run(b, chromedp.Evaluate[string](`(() => {
			const boxes = [...document.querySelectorAll('main table[data-testid^="history-by-"]')].map(t => {
				const r = t.getBoundingClientRect(), c = t.parentElement.getBoundingClientRect();
				return {id: t.dataset.testid, l: r.left, r: r.right, t: r.top, b: r.bottom, spill: r.right > c.right + 1};
			});
			const out = [];
			if (boxes.length < 5) out.push(boxes.length + " tables");
			for (const a of boxes) {
				if (a.spill) out.push(a.id + " runs out of its column");
				for (const b of boxes) {
					if (a.id < b.id && a.l < b.r - 1 && b.l < a.r - 1 && a.t < b.b - 1 && b.t < a.b - 1) out.push(a.id + " overlaps " + b.id);
				}
			}
			return out.join("; ");
		})()`))
		if err != nil || overlaps != "" {
			t.Errorf("/admin/history at %d px: %s (%v)", width, overlaps, err)
		}
		screenshot(t, b, fmt.Sprintf("admin-history-tables-%d", width))
	}
	if got := textOf(t, b, "history-by-address"); strings.Contains(got, "other addresses") {
		t.Errorf("keyed traffic is listed as anonymous: %q", got)
	}
}
