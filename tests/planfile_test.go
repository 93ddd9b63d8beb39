package tests

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluicehq/sluice/internal/plans"
)

// TestDashboardPlansFileAndPlayground: an operator uploads a plans file
// that adds a plan, sees the diff, applies it, finds the plan stored, and
// replays the seed article's token bucket preset in the playground.
func TestDashboardPlansFileAndPlayground(t *testing.T) {
	p := startPortal(t)
	if _, err := p.Plans.Create(t.Context(), "test", plans.PlanInput{Slug: "free", Name: "Free", IsPublic: true}); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "plans.yaml")
	if err := os.WriteFile(file, []byte(`version: 1
plans:
  - slug: partner
    name: Partner
    limits:
      - name: search
        route: GET /api/search
        algorithm: token_bucket
        limit: 2
        window_seconds: 1
        burst: 10
`), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := browser(t, 90*time.Second)
	signIn(t, ctx, p.URL, operatorEmail)

	do(t, ctx, "upload and preview",
		chromedp.Navigate(p.URL+"/admin/plans"),
		chromedp.WaitVisible(tid("plans-file-link")),
		chromedp.Click(tid("plans-file-link")),
		chromedp.WaitVisible(tid("planfile-preview")),
		chromedp.SetUploadFiles(tid("planfile-upload"), []string{file}),
		chromedp.Click(tid("planfile-preview")),
		chromedp.WaitVisible(tid("planfile-diff")),
	)
	diff := textOf(t, ctx, "planfile-diff")
	if !strings.Contains(diff, "+ plan partner") || strings.Contains(diff, "free") {
		t.Fatalf("diff %q: want the new plan only (no prune, so free is kept)", diff)
	}
	screenshot(t, ctx, "planfile-diff")
	if _, err := p.Plans.GetBySlug(t.Context(), "partner"); err == nil {
		t.Fatal("the preview wrote the plan")
	}
	do(t, ctx, "apply", chromedp.Click(tid("planfile-apply")), chromedp.WaitVisible(tid("planfile-applied")))
	got, err := p.Plans.GetBySlug(t.Context(), "partner")
	if err != nil || len(got.Limits) != 1 || got.Limits[0].Burst != 10 {
		t.Fatalf("applied plan: %v %+v", err, got)
	}
	if _, err := p.Plans.GetBySlug(t.Context(), "free"); err != nil {
		t.Fatalf("a plan the file leaves out was removed without prune: %v", err)
	}

	do(t, ctx, "replay preset",
		chromedp.Navigate(p.URL+"/admin/playground"),
		chromedp.WaitVisible(tid("playground-form")),
		chromedp.SetValue(tid("playground-preset"), "token-bucket-seed"),
		chromedp.Click(tid("playground-replay")),
		chromedp.WaitVisible(tid("playground-results")),
	)
	run := `[data-testid="playground-run"][data-algorithm="token_bucket"] `
	admitted, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(run+`[data-testid="run-admitted"]`)))
	if err != nil {
		t.Fatal(err)
	}
	rejected, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(run+`[data-testid="run-rejected"]`)))
	if err != nil {
		t.Fatal(err)
	}
	if admitted != "11" || rejected != "1" {
		t.Errorf("token bucket run: %s admitted, %s rejected; want 11 and 1 (10 at once, the 11th rejected, one more 0.5 s later)", admitted, rejected)
	}
	screenshot(t, ctx, "playground")
}

// TestDashboardPlaygroundRecordedTraffic: requests to the running portal
// are recorded (in its Redis), and the playground replays them with the
// same tier to the same outcome the live portal gave.
func TestDashboardPlaygroundRecordedTraffic(t *testing.T) {
	p := startPortal(t)
	_, secret := p.keyOnPlan(t, "metered", plans.LimitInput{Name: "search", Route: "GET /api/search", Algorithm: "fixed_window", Limit: 5, WindowSeconds: 3600})
	live := map[int]int{}
	for range 8 {
		live[apiStatus(t, p.URL, "/api/search?q=x", secret)]++
	}
	if live[http.StatusOK] != 5 || live[http.StatusTooManyRequests] != 3 {
		t.Fatalf("live answers %v, want 5 admitted and 3 rejected", live)
	}
	// The recorder flushes every second; wait for the route to appear.
	took, ok := eventually(10*time.Second, func() bool {
		n, err := p.Redis.ZCard(context.Background(), p.Prefix+"traffic:routes").Result()
		return err == nil && n > 0
	})
	if !ok {
		t.Fatalf("no recorded route within %v", took)
	}
	ctx := browser(t, 90*time.Second)
	signIn(t, ctx, p.URL, operatorEmail)
	do(t, ctx, "replay recorded traffic",
		chromedp.Navigate(p.URL+"/admin/playground"),
		chromedp.WaitVisible(tid("playground-form")),
		chromedp.SetValue(tid("playground-preset"), "recorded:GET /api/search"),
		chromedp.SetValue(tid("playground-algorithm"), "fixed_window"),
		chromedp.SetValue(chromedp.CSS(`[data-testid="playground-form"] [name="limit"]`), "5"),
		chromedp.SetValue(chromedp.CSS(`[data-testid="playground-form"] [name="window_seconds"]`), "3600"),
		chromedp.SetValue(chromedp.CSS(`[data-testid="playground-form"] [name="burst"]`), "0"),
		chromedp.Click(tid("playground-replay")),
		chromedp.WaitVisible(tid("playground-results")),
	)
	run := `[data-testid="playground-run"][data-algorithm="fixed_window"] `
	admitted, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(run+`[data-testid="run-admitted"]`)))
	if err != nil {
		t.Fatal(err)
	}
	rejected, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(run+`[data-testid="run-rejected"]`)))
	if err != nil {
		t.Fatal(err)
	}
	if admitted != "5" || rejected != "3" {
		t.Errorf("replay of the recorded traffic: %s admitted, %s rejected; live was 5 and 3", admitted, rejected)
	}
	if note := textOf(t, ctx, "playground-sampling"); !strings.Contains(note, "1 subject recorded in full") {
		t.Errorf("sampling note %q", note)
	}
	screenshot(t, ctx, "playground-recorded")
}
