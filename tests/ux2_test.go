package tests

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/billing"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/users"
)

// signOut signs the browser out through the header's button.
func signOut(t *testing.T, ctx context.Context) {
	t.Helper()
	do(t, ctx, "sign out", chromedp.Click(tid("signout")), chromedp.WaitVisible(tid("signin-form")))
}

// policyOf calls the sample API with the key and returns its
// RateLimit-Policy header.
func policyOf(t *testing.T, base, secret string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/api/items/1", nil)
	req.Header.Set("Authorization", "Bearer "+secret)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET /api/items/1: %v", err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.Header.Get("RateLimit-Policy")
}

// TestPlanArchiveAndUpgradeInBrowser: an operator archives a plan, which
// leaves the sign-up choices and the developer's upgrade choices; the
// developer asks for Pro from the portal; the operator approves it in the
// dashboard; the key is enforced under Pro's limits at once, and the
// developer sees the outcome.
func TestPlanArchiveAndUpgradeInBrowser(t *testing.T) {
	p := startPortal(t)
	ctx0 := context.Background()
	tier := func(name string, limit int64) []plans.LimitInput {
		return []plans.LimitInput{{Name: name, Algorithm: "fixed_window", Limit: limit, WindowSeconds: 60}}
	}
	if _, err := p.Plans.Create(ctx0, "test", plans.PlanInput{Slug: "free", Name: "Free", IsDefault: true, IsPublic: true, Limits: tier("all", 50)}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Plans.Create(ctx0, "test", plans.PlanInput{Slug: "pro", Name: "Pro", IsPublic: true, Limits: tier("all", 500)}); err != nil {
		t.Fatal(err)
	}
	legacy, err := p.Plans.Create(ctx0, "test", plans.PlanInput{Slug: "legacy", Name: "Legacy", IsPublic: true, Limits: tier("all", 5)})
	if err != nil {
		t.Fatal(err)
	}
	_, secret, err := p.Keys.Create(ctx0, "test", apikeys.NewKey{UserID: p.Dev.ID, Name: "e2e key"})
	if err != nil {
		t.Fatal(err)
	}
	if took, ok := eventually(5*time.Second, func() bool { return strings.Contains(policyOf(t, p.URL, secret), `"free-all"`) }); !ok {
		t.Fatalf("the key was not enforced under Free within %v", took)
	}

	ctx := browser(t, 120*time.Second)
	signIn(t, ctx, p.URL, operatorEmail)
	do(t, ctx, "archive Legacy",
		chromedp.Navigate(fmt.Sprintf("%s/admin/plans/%d", p.URL, legacy.ID)),
		chromedp.WaitVisible(tid("plan-archive")),
		chromedp.Click(tid("plan-archive")),
		chromedp.WaitVisible(tid("plan-archived-banner")),
	)
	if got := textOf(t, ctx, "plan-archived-banner"); !strings.Contains(got, "offered to nobody new") {
		t.Errorf("archived banner %q", got)
	}
	do(t, ctx, "plans list", chromedp.Navigate(p.URL+"/admin/plans"), chromedp.WaitVisible(tid("plan-archived")))
	signOut(t, ctx)

	do(t, ctx, "sign-up choices", chromedp.Navigate(p.URL+"/signup"), chromedp.WaitVisible(tid("signup-plan-choice")))
	if got := textOf(t, ctx, "signup-plan-choice"); !strings.Contains(got, "Pro") || strings.Contains(got, "Legacy") {
		t.Errorf("sign-up offers %q: want Pro and not the archived Legacy", got)
	}

	signIn(t, ctx, p.URL, devEmail)
	do(t, ctx, "my plan", chromedp.Navigate(p.URL+"/app/plan"), chromedp.WaitVisible(tid("upgrade-plan")))
	if got := textOf(t, ctx, "my-plan"); got != "Free" {
		t.Errorf("my plan = %q, want Free", got)
	}
	if got := textOf(t, ctx, "upgrade-plan"); got != "Pro" {
		t.Errorf("upgrade choices %q, want only Pro (not Free, not the archived Legacy)", got)
	}
	do(t, ctx, "ask for Pro",
		chromedp.Click(tid("upgrade-request")),
		chromedp.WaitVisible(tid("upgrade-sent")),
		chromedp.WaitVisible(tid("upgrade-pending")),
	)
	if got := textOf(t, ctx, "upgrade-outcome"); got != "waiting for an operator" {
		t.Errorf("outcome while pending = %q", got)
	}
	signOut(t, ctx)

	signIn(t, ctx, p.URL, operatorEmail)
	do(t, ctx, "approve",
		chromedp.Navigate(p.URL+"/admin/developers"),
		chromedp.WaitVisible(tid("upgrades-waiting")),
		chromedp.Click(tid("upgrades-link")),
		chromedp.WaitVisible(tid("upgrade-row")),
		chromedp.SendKeys(tid("upgrade-note"), "welcome to Pro"),
		chromedp.Click(tid("upgrade-approve")),
		chromedp.WaitVisible(tid("upgrade-done")),
	)
	if got := textOf(t, ctx, "upgrade-done"); !strings.Contains(got, devEmail) || !strings.Contains(got, "approved") {
		t.Errorf("confirmation %q", got)
	}
	took, ok := eventually(5*time.Second, func() bool { return strings.Contains(policyOf(t, p.URL, secret), `"pro-all";q=500`) })
	if !ok {
		t.Fatalf("after approval the key is enforced as %q after %v, want Pro's limit", policyOf(t, p.URL, secret), took)
	}
	t.Logf("Pro enforced %v after the approval", took)
	signOut(t, ctx)

	signIn(t, ctx, p.URL, devEmail)
	do(t, ctx, "outcome", chromedp.Navigate(p.URL+"/app/plan"), chromedp.WaitVisible(tid("upgrade-history")))
	if got := textOf(t, ctx, "my-plan"); got != "Pro" {
		t.Errorf("my plan after approval = %q, want Pro", got)
	}
	if got := textOf(t, ctx, "upgrade-history"); !strings.Contains(got, "approved") || !strings.Contains(got, "welcome to Pro") {
		t.Errorf("history %q lacks the approval and the note", got)
	}
	screenshot(t, ctx, "my-plan-approved")
}

// TestOperatorRemovalAndDisabledSignInInBrowser: an operator removes
// another, cannot remove the last one (themselves), and a developer an
// operator disabled is told so at sign-in.
func TestOperatorRemovalAndDisabledSignInInBrowser(t *testing.T) {
	p := startPortal(t)
	ctx0 := context.Background()
	if _, err := p.Users.Create(ctx0, users.NewUser{Email: "second@example.com", Password: password, Role: users.RoleOperator}); err != nil {
		t.Fatal(err)
	}
	ctx := browser(t, 90*time.Second)
	signIn(t, ctx, p.URL, operatorEmail)
	second := `[data-testid="operator-row"][data-email="second@example.com"] `
	do(t, ctx, "remove the second operator",
		chromedp.Navigate(p.URL+"/admin/operators"),
		chromedp.WaitVisible(chromedp.CSS(second+`[data-testid="operator-remove"]`)),
		chromedp.Click(chromedp.CSS(second+`[data-testid="operator-remove"]`)),
		chromedp.WaitVisible(tid("operator-done")),
	)
	if got := textOf(t, ctx, "operators-table"); strings.Contains(got, "second@example.com") {
		t.Errorf("the removed operator is still listed: %q", got)
	}
	me := `[data-testid="operator-row"][data-email="` + operatorEmail + `"] `
	do(t, ctx, "remove myself, the last operator",
		chromedp.Click(chromedp.CSS(me+`[data-testid="operator-remove-confirm"]`)),
		chromedp.Click(chromedp.CSS(me+`[data-testid="operator-remove"]`)),
		chromedp.WaitVisible(tid("operator-refused")),
	)
	if got := textOf(t, ctx, "operator-refused"); !strings.Contains(got, "last operator") {
		t.Errorf("refusal %q", got)
	}
	if got := textOf(t, ctx, "viewer-email"); got != operatorEmail {
		t.Errorf("signed in as %q after the refusal", got)
	}
	signOut(t, ctx)

	if _, err := p.Users.SetDisabled(ctx0, p.Dev.ID, true); err != nil {
		t.Fatal(err)
	}
	do(t, ctx, "disabled developer signs in",
		chromedp.Navigate(p.URL+"/signin"),
		chromedp.WaitVisible(tid("signin-form")),
		chromedp.SendKeys(tid("signin-email"), devEmail),
		chromedp.SendKeys(tid("signin-password"), password),
		chromedp.Click(tid("signin-submit")),
		chromedp.WaitVisible(tid("signin-error")),
	)
	if got := textOf(t, ctx, "signin-error"); !strings.Contains(got, "This account is disabled") {
		t.Errorf("sign-in error %q", got)
	}
	screenshot(t, ctx, "disabled-sign-in")
}

// TestAllowanceBarMovesInBrowser: a developer on a monthly quota sees "N of
// M this month, renews on <date>"; traffic moves the used figure, and an
// operator moving the billing anchor moves the renewal date.
func TestAllowanceBarMovesInBrowser(t *testing.T) {
	p := startPortal(t)
	_, secret := p.keyOnPlan(t, "metered", plans.LimitInput{Name: "monthly", Algorithm: "quota", Period: "month", Limit: 50})
	ctx := browser(t, 90*time.Second)
	signIn(t, ctx, p.URL, devEmail)
	do(t, ctx, "usage", chromedp.Navigate(p.URL+"/app"), chromedp.WaitVisible(tid("usage-renews")))
	before := textOf(t, ctx, "usage-renews")
	if !strings.HasPrefix(before, "0 of 50 this month, renews on ") {
		t.Fatalf("allowance before traffic = %q", before)
	}
	for range 3 {
		if code := apiStatus(t, p.URL, "/api/items/1", secret); code != http.StatusOK {
			t.Fatalf("API call: status %d", code)
		}
	}
	var after string
	if _, ok := eventually(10*time.Second, func() bool {
		after = textOf(t, ctx, "usage-renews")
		return strings.HasPrefix(after, "3 of 50 this month")
	}); !ok {
		t.Fatalf("allowance after 3 requests = %q, want 3 of 50", after)
	}
	renews := func(s string) string { _, d, _ := strings.Cut(s, "renews on "); return d }
	// The operator moves the billing anchor ten days back: the month now
	// renews on another day.
	anchor := time.Now().UTC().AddDate(0, 0, -10)
	if _, err := billing.SetAnchor(context.Background(), p.Pool, "test", p.Dev.ID, &anchor); err != nil {
		t.Fatal(err)
	}
	var moved string
	if _, ok := eventually(10*time.Second, func() bool {
		moved = textOf(t, ctx, "usage-renews")
		return renews(moved) != renews(after) && renews(moved) != ""
	}); !ok {
		t.Fatalf("renewal date stayed %q after the anchor moved", renews(after))
	}
	want := anchor.AddDate(0, 1, 0).Format("2 January 2006")
	if !strings.Contains(moved, want) {
		t.Errorf("renews %q, want the anchor's day a month on (%s)", moved, want)
	}
	screenshot(t, ctx, "allowance-bar")
}

// TestTierFormRefusesAndKeepsWhatWasTypedInBrowser: in the add-tier form a
// huge limit and a cost of 0 are refused with the field named and shown as
// typed; a window of 1.5 never becomes 0 (the browser or the server refuses
// it); nothing is saved; a token bucket without a burst shows its limit as
// its burst in the table, as the docs do.
func TestTierFormRefusesAndKeepsWhatWasTypedInBrowser(t *testing.T) {
	p := startPortal(t)
	pl, err := p.Plans.Create(context.Background(), "test", plans.PlanInput{Slug: "forms", Name: "Forms", IsPublic: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := browser(t, 90*time.Second)
	signIn(t, ctx, p.URL, operatorEmail)
	do(t, ctx, "plan page", chromedp.Navigate(fmt.Sprintf("%s/admin/plans/%d", p.URL, pl.ID)), chromedp.WaitVisible(tid("tier-add")), htmxReady())
	fill := func(limit, window, cost string) {
		t.Helper()
		do(t, ctx, "fill the add form",
			htmxBound(`#tier-add`),
			chromedp.SetValue(chromedp.CSS(`#tier-add [name="name"]`), "items"),
			chromedp.SetValue(chromedp.CSS(`#tier-add [name="route"]`), "GET /api/items/{id}"),
			chromedp.SetValue(chromedp.CSS(`#tier-add [name="algorithm"]`), "token_bucket"),
			chromedp.SetValue(chromedp.CSS(`#tier-add [name="limit"]`), limit),
			chromedp.SetValue(chromedp.CSS(`#tier-add [name="window_seconds"]`), window),
			chromedp.SetValue(chromedp.CSS(`#tier-add [name="burst"]`), ""),
			chromedp.SetValue(chromedp.CSS(`#tier-add [name="cost"]`), cost),
			chromedp.Click(tid("tier-add")),
		)
	}
	value := func(name string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('#tier-add [name="`+name+`"]').value`))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	fill("99999999999999999999", "60", "1")
	do(t, ctx, "huge limit refused", chromedp.WaitVisible(chromedp.CSS(`#tier-add [data-testid="error-limit"]`)))
	if got := textOf(t, ctx, "error-limit"); got != "is too large" {
		t.Errorf("limit error %q", got)
	}
	if got := value("limit"); got != "99999999999999999999" {
		t.Errorf("limit shows %q, want what was typed", got)
	}
	fill("10", "60", "0")
	do(t, ctx, "cost 0 refused", chromedp.WaitVisible(chromedp.CSS(`#tier-add [data-testid="error-cost"]`)))
	if got := value("cost"); got != "0" {
		t.Errorf("cost shows %q, want 0 as typed", got)
	}
	fill("10", "1.5", "1")
	// Either the browser refuses the step (the input is invalid and nothing
	// is sent) or the server names the field; 1.5 never becomes 0.
	refused, err := chromedp.Run(ctx, chromedp.Poll[bool](`(() => {
		const w = document.querySelector('#tier-add [name="window_seconds"]');
		return !w.checkValidity() || !!document.querySelector('#tier-add [data-testid="error-window_seconds"]');
	})()`, chromedp.WithPollingTimeout(5*time.Second)))
	if err != nil || !refused {
		t.Errorf("a window of 1.5 was not refused: %v", err)
	}
	if got := value("window_seconds"); got != "1.5" {
		t.Errorf("window shows %q, want 1.5 as typed", got)
	}
	cur, err := p.Plans.Get(context.Background(), pl.ID)
	if err != nil || len(cur.Limits) != 0 {
		t.Fatalf("a refused tier was saved: %+v, %v", cur.Limits, err)
	}
	fill("7", "60", "")
	do(t, ctx, "token bucket saved", chromedp.WaitVisible(chromedp.CSS(`[data-testid="tier-row"][data-tier="items"]`)))
	if got := textOf(t, ctx, "tier-burst"); got != "7" {
		t.Errorf("table burst %q, want 7 (the limit)", got)
	}
	screenshot(t, ctx, "tier-form-refusals")
}

// TestCountPerDeveloperSharesAcrossKeys: an endpoint tier counted per
// developer binds all the developer's keys together, through the running
// portal and real Redis; the usual per-key tier beside it does not.
func TestCountPerDeveloperSharesAcrossKeys(t *testing.T) {
	p := startPortal(t)
	k1, secret1 := p.keyOnPlan(t, "team",
		plans.LimitInput{Name: "items", Route: "GET /api/items/{id}", Algorithm: "fixed_window", Limit: 2, WindowSeconds: 3600, CountPer: "developer"},
		plans.LimitInput{Name: "search", Route: "GET /api/search", Algorithm: "fixed_window", Limit: 2, WindowSeconds: 3600})
	_, secret2, err := p.Keys.Create(context.Background(), "test", apikeys.NewKey{UserID: p.Dev.ID, Name: "second", PlanID: k1.PlanID})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := eventually(5*time.Second, func() bool { return apiStatus(t, p.URL, "/api/rate-limit-status", secret2) == http.StatusOK }); !ok {
		t.Fatal("the second key was not accepted")
	}
	var got []int
	for _, s := range []string{secret1, secret1, secret2} {
		got = append(got, apiStatus(t, p.URL, "/api/items/1", s))
	}
	if fmt.Sprint(got) != "[200 200 429]" {
		t.Errorf("items (per developer) with key 1, 1, 2: %v, want [200 200 429]", got)
	}
	got = nil
	for _, s := range []string{secret1, secret1, secret2, secret1} {
		got = append(got, apiStatus(t, p.URL, "/api/search?q=lamp", s))
	}
	if fmt.Sprint(got) != "[200 200 200 429]" {
		t.Errorf("search (per key) with key 1, 1, 2, 1: %v, want [200 200 200 429]", got)
	}
}
