package tests

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/plans"
)

// TestPortalNewDeveloper: a new developer signs up, lands on their keys,
// creates a key, copies the secret shown once, calls the sample API with it
// (through the Go client), and watches their usage page move, up to the
// 100 % banner, without reloading it.
func TestPortalNewDeveloper(t *testing.T) {
	p := startPortal(t)
	if _, err := p.Plans.Create(context.Background(), "test", plans.PlanInput{
		Slug: "starter", Name: "Starter", IsPublic: true, IsDefault: true,
		Limits: []plans.LimitInput{
			// A sliding log, not a fixed window: the test must not cross a
			// window's end, which would reset the count it watches.
			{Name: "search", Route: "GET /api/search", Algorithm: "sliding_window_log", Limit: 5, WindowSeconds: 3600},
			{Name: "global", Algorithm: "sliding_window_log", Limit: 1000, WindowSeconds: 3600},
		},
	}); err != nil {
		t.Fatalf("create default plan: %v", err)
	}
	ctx := browser(t, 120*time.Second)
	const email = "newcomer@example.com"

	do(t, ctx, "sign up",
		chromedp.Navigate(p.URL+"/signup"),
		chromedp.WaitVisible(tid("signup-form")),
		chromedp.SendKeys(tid("signup-email"), email),
		chromedp.SendKeys(tid("signup-password"), "short"),
		chromedp.Evaluate[chromedp.Void](`document.querySelector('[data-testid="signup-form"]').noValidate = true`),
		chromedp.Click(tid("signup-submit")),
		chromedp.WaitVisible(tid("error-password")),
	)
	if got := textOf(t, ctx, "error-password"); got != "must be at least 12 characters" {
		t.Errorf("password error %q", got)
	}
	screenshot(t, ctx, "signup-error")
	do(t, ctx, "sign up again",
		chromedp.SendKeys(tid("signup-password"), "a long enough passphrase"),
		chromedp.Click(tid("signup-submit")),
		chromedp.WaitVisible(tid("signup-done")),
	)
	// Sign-up signs no one in (the answer is the same for a registered
	// address): the new developer signs in.
	do(t, ctx, "sign in after sign-up",
		chromedp.SendKeys(tid("signin-email"), email),
		chromedp.SendKeys(tid("signin-password"), "a long enough passphrase"),
		chromedp.Click(tid("signin-submit")),
		chromedp.WaitVisible(tid("create-key-form")),
	)
	if got := textOf(t, ctx, "viewer-email"); got != email {
		t.Fatalf("signed in as %q, want %q", got, email)
	}

	do(t, ctx, "create key",
		chromedp.SendKeys(tid("key-name"), "laptop"),
		chromedp.Click(tid("create-key")),
		chromedp.WaitVisible(tid("secret")),
		chromedp.Click(tid("copy-secret")),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="copy-secret"][data-copied="true"]`)),
	)
	secret, err := chromedp.Run(ctx, chromedp.Value(tid("secret")))
	if err != nil {
		t.Fatalf("read secret: %v", err)
	}
	if err := apikeys.Check(secret); err != nil {
		t.Fatalf("shown secret %q is not a key: %v", secret, err)
	}
	// The copy button put the secret on the clipboard; where the headless
	// browser lets us read it back, it must be the secret.
	if clip, err := chromedp.Run(ctx, chromedp.Evaluate[string](`navigator.clipboard.readText().catch(() => "")`, chromedp.EvalAwaitPromise)); err == nil && clip != "" && clip != secret {
		t.Errorf("clipboard holds %q, want the secret", clip)
	}
	screenshot(t, ctx, "secret-shown-once")

	do(t, ctx, "keys list shows only the prefix",
		chromedp.Click(tid("secret-done")),
		chromedp.WaitVisible(tid("my-key-prefix")),
	)
	if got := textOf(t, ctx, "my-key-prefix"); got != apikeys.PrefixOf(secret)+"…" {
		t.Errorf("listed key %q, want the prefix %q", got, apikeys.PrefixOf(secret))
	}

	do(t, ctx, "usage page", chromedp.Navigate(p.URL+"/app"), chromedp.WaitVisible(tid("usage-used")))
	if got := textOf(t, ctx, "usage-used"); got != "0" {
		t.Errorf("a fresh key shows %q used", got)
	}
	do(t, ctx, "mark page", htmxReady(), chromedp.Evaluate[chromedp.Void](`window.sluiceMarker = "still here"`))

	// The snapshot learns the new key from NOTIFY; until then the API
	// answers 401.
	if _, ok := eventually(5*time.Second, func() bool { return apiStatus(t, p.URL, "/api/rate-limit-status", secret) == http.StatusOK }); !ok {
		t.Fatal("the new key was not accepted by the API within 5 s")
	}
	c := client.New(client.Config{Key: secret, MaxAttempts: 1})
	call := func() int {
		res, err := c.Get(ctx, p.URL+"/api/search?q=lantern")
		if err != nil {
			t.Fatalf("search: %v", err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	for i := range 3 {
		if got := call(); got != http.StatusOK {
			t.Fatalf("search %d: status %d", i+1, got)
		}
	}
	searchUsed := func() string {
		// One evaluation: the live stream swaps the element at any moment.
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](
			`(document.querySelector('[data-policy="starter-search"] [data-testid="usage-used"]') || {}).innerText || ""`))
		if err != nil {
			return ""
		}
		return strings.TrimSpace(s)
	}
	if took, ok := eventually(5*time.Second, func() bool { return searchUsed() == "3" }); !ok {
		screenshot(t, ctx, "failed-usage-move")
		t.Fatalf("the usage page shows %q used, want 3", searchUsed())
	} else {
		t.Logf("usage page moved %v after the calls", took)
	}
	screenshot(t, ctx, "usage-moved")

	for range 3 {
		call()
	}
	if _, ok := eventually(5*time.Second, func() bool {
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('[data-testid="usage-banner-100"]').length`))
		return err == nil && n == 1
	}); !ok {
		screenshot(t, ctx, "failed-banner")
		t.Fatal("no 100 % banner after spending the search limit")
	}
	if got := searchUsed(); got != "5" {
		t.Errorf("after 6 searches on a limit of 5 the page shows %q used", got)
	}
	marker, err := chromedp.Run(ctx, chromedp.Evaluate[string](`window.sluiceMarker || ""`))
	if err != nil || marker != "still here" {
		t.Errorf("the usage page reloaded instead of updating live (marker %q, %v)", marker, err)
	}
	screenshot(t, ctx, "usage-limit-reached")

	do(t, ctx, "docs show my plan", chromedp.Navigate(p.URL+"/docs"), chromedp.WaitVisible(tid("docs-your-plan")))
	if got := textOf(t, ctx, "docs-your-plan"); !strings.Contains(got, "Starter") {
		t.Errorf("docs banner %q does not name the plan", got)
	}
	screenshot(t, ctx, "docs")
}

// TestClientAgainstPortal: 50 goroutines share one key on a plan allowing 10
// requests per second on GET /api/items/{id}, through the real portal (the
// sample API, the snapshot, the Redis store), with the Go client. Every call
// must succeed, and the portal must never admit more than 10 in a window:
// the admitted responses are grouped by their window (X-RateLimit-Reset of a
// fixed window) and each group must hold at most 10 distinct Remaining
// values.
func TestClientAgainstPortal(t *testing.T) {
	p := startPortal(t)
	_, secret := p.keyOnPlan(t, "ten-per-second",
		plans.LimitInput{Name: "items", Route: "GET /api/items/{id}", Algorithm: "fixed_window", Limit: 10, WindowSeconds: 1})
	if _, ok := eventually(5*time.Second, func() bool { return apiStatus(t, p.URL, "/api/rate-limit-status", secret) == http.StatusOK }); !ok {
		t.Fatal("the key was not accepted by the API within 5 s")
	}
	tests := []struct {
		name string
		cfg  client.Config
	}{
		{"full jitter", client.Config{Jitter: client.FullJitter, MaxAttempts: 30, BaseDelay: 50 * time.Millisecond, MaxDelay: 2 * time.Second}},
		{"pacing", client.Config{Pace: true, MaxAttempts: 30}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.Key = secret
			c := client.New(cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			type admitted struct{ reset, remaining string }
			results := make(chan admitted, 50)
			errs := make(chan error, 50)
			var wg sync.WaitGroup
			for range 50 {
				wg.Go(func() {
					res, err := c.Get(ctx, p.URL+"/api/items/7")
					if err != nil {
						errs <- err
						return
					}
					_, _ = io.Copy(io.Discard, res.Body)
					res.Body.Close()
					if res.StatusCode != http.StatusOK {
						errs <- fmt.Errorf("final status %d", res.StatusCode)
						return
					}
					results <- admitted{res.Header.Get("X-RateLimit-Reset"), res.Header.Get("X-RateLimit-Remaining")}
				})
			}
			wg.Wait()
			close(results)
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			// Admissions are counted per window: the distinct Remaining
			// values alone could never exceed the limit.
			windows := map[string]map[string]bool{}
			perWindow := map[string]int{}
			n := 0
			for a := range results {
				n++
				perWindow[a.reset]++
				if windows[a.reset] == nil {
					windows[a.reset] = map[string]bool{}
				}
				if windows[a.reset][a.remaining] {
					t.Errorf("window ending %s admitted two requests leaving %s", a.reset, a.remaining)
				}
				windows[a.reset][a.remaining] = true
			}
			if n != 50 {
				t.Errorf("%d calls succeeded, want 50", n)
			}
			for reset, n := range perWindow {
				if n > 10 {
					t.Errorf("window ending %s admitted %d requests, limit 10", reset, n)
				}
			}
			t.Logf("%s: 50 calls in %d windows", tt.name, len(windows))
		})
	}
}
