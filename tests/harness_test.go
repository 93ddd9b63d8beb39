// Package tests holds Sluice's end-to-end tests: the portal with real
// Postgres and Redis, driven by a real headless Chromium.
package tests

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/sampleapi"
	"github.com/sluicehq/sluice/internal/snapshot"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/users"
	"github.com/sluicehq/sluice/web"
)

const (
	operatorEmail = "operator@example.com"
	devEmail      = "developer@example.com"
	password      = "correct horse battery staple"
)

// portal is a Sluice portal as a test sees it: its URL and the services to
// arrange data with.
type portal struct {
	URL    string
	Pool   *pgxpool.Pool
	Plans  *plans.Service
	Keys   *apikeys.Service
	Users  *users.Repo
	Holder *snapshot.Holder
	Dev    users.User
}

// startPortal runs the portal's surfaces in this process, on 127.0.0.1 and a
// free port, over a fresh Postgres database and a private Redis key prefix:
// the sample API behind the enforce middleware and the control-plane
// snapshot, and the web UI. It is wired as cmd/portal wires them.
func startPortal(t *testing.T) *portal {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	pool := testenv.Postgres(t)
	rdb, prefix := testenv.Redis(t)
	store, err := enforce.NewRedisStore(rdb, enforce.RedisOptions{Prefix: prefix})
	if err != nil {
		t.Fatalf("redis store: %v", err)
	}
	t.Cleanup(func() { _ = store.Close() })

	routes := []string{sampleapi.RouteSearch, sampleapi.RouteItem, sampleapi.RouteCreateReport}
	lastUsed := apikeys.NewLastUsed(pool, logger, time.Second)
	go func() { _ = lastUsed.Run(ctx) }()
	holder := snapshot.NewHolder(pool, logger, snapshot.Options{LastUsed: lastUsed})
	go func() { _ = holder.Run(ctx) }()
	select {
	case <-holder.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("snapshot not loaded within 10 s")
	}

	p := &portal{
		Pool:   pool,
		Plans:  plans.NewService(pool, routes, logger),
		Keys:   apikeys.NewService(pool, routes, logger),
		Users:  users.NewRepo(pool),
		Holder: holder,
	}
	if _, err := p.Users.Create(ctx, users.NewUser{Email: operatorEmail, Password: password, Role: users.RoleOperator}); err != nil {
		t.Fatalf("create operator: %v", err)
	}
	if p.Dev, err = p.Users.Create(ctx, users.NewUser{Email: devEmail, Password: password, Role: users.RoleDeveloper}); err != nil {
		t.Fatalf("create developer: %v", err)
	}

	mw := enforce.NewMiddleware(store, holder, enforce.MiddlewareOptions{Logger: logger})
	ui := web.New(web.Deps{
		Logger:        logger,
		SessionSecret: []byte("browser-test-session-secret-0123456789"),
		Users:         p.Users,
		Pool:          pool,
		Plans:         p.Plans,
		Keys:          p.Keys,
		Limiter:       store,
		Usage:         store,
		Health: []web.HealthCheck{
			{Name: "Postgres", Check: pool.Ping},
			{Name: "Redis", Check: func(ctx context.Context) error { return rdb.Ping(ctx).Err() }},
		},
	})
	mux := http.NewServeMux()
	mux.Handle("/api/", sampleapi.New(mw, sampleapi.Options{Logger: logger}))
	mux.Handle("/", ui)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	p.URL = srv.URL
	return p
}

// chromiumPath finds the browser; the tests need one and say how to get it.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" || os.Getenv("TEST_REQUIRE_SERVICES") == "1" {
		t.Fatal("no Chromium: apt-get install -y chromium")
	}
	t.Skip("no Chromium on this machine (apt-get install -y chromium); browser tests skipped")
	return ""
}

// browser starts a fresh headless Chromium for one test, with its own
// profile, and returns a tab context bounded by timeout.
func browser(t *testing.T, timeout time.Duration) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(allocCtx)
	ctx, cancelTimeout := context.WithTimeout(ctx, timeout)
	t.Cleanup(func() {
		cancelTimeout()
		cancelTab()
		cancelAlloc()
	})
	return ctx
}

// tid selects an element by its data-testid.
func tid(id string) chromedp.CSS {
	return chromedp.CSS(`[data-testid="` + id + `"]`)
}

// do runs actions and fails the test, with a screenshot, on error.
func do(t *testing.T, ctx context.Context, step string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, actions...); err != nil {
		screenshot(t, ctx, "failed-"+step)
		t.Fatalf("%s: %v", step, err)
	}
}

// textOf returns the trimmed text of the first element with the test id.
func textOf(t *testing.T, ctx context.Context, id string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(tid(id), chromedp.NodeVisible))
	if err != nil {
		screenshot(t, ctx, "failed-text-"+id)
		t.Fatalf("text of %s: %v", id, err)
	}
	return strings.TrimSpace(s)
}

// screenshot saves the visible page as a PNG in the test's artifact
// directory and logs where.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	if ctx.Err() != nil {
		return
	}
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Logf("screenshot %s: %v", name, err)
		return
	}
	path := filepath.Join(t.ArtifactDir(), name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Errorf("save screenshot: %v", err)
		return
	}
	t.Logf("screenshot: %s", path)
}

// signIn signs the browser in through the form.
func signIn(t *testing.T, ctx context.Context, base, email string) {
	t.Helper()
	signInTo(t, ctx, base, email, "")
}

// signInTo signs in and lands on next (a local path; "" for the default).
func signInTo(t *testing.T, ctx context.Context, base, email, next string) {
	t.Helper()
	u := base + "/signin"
	if next != "" {
		u += "?next=" + url.QueryEscape(next)
	}
	do(t, ctx, "sign in",
		chromedp.Navigate(u),
		chromedp.WaitVisible(tid("signin-form")),
		chromedp.SendKeys(tid("signin-email"), email),
		chromedp.SendKeys(tid("signin-password"), password),
		chromedp.Click(tid("signin-submit")),
		chromedp.WaitVisible(tid("viewer-email")),
	)
	if got := textOf(t, ctx, "viewer-email"); got != email {
		t.Fatalf("signed in as %q, want %q", got, email)
	}
}

// apiStatus calls the sample API with a key and returns the status.
func apiStatus(t *testing.T, base, path, secret string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+path, nil)
	req.Header.Set("Authorization", "Bearer "+secret)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode
}

func (p *portal) keyOnPlan(t *testing.T, slug string, tiers ...plans.LimitInput) (apikeys.Key, string) {
	t.Helper()
	ctx := context.Background()
	pl, err := p.Plans.Create(ctx, "test", plans.PlanInput{Slug: slug, Name: strings.ToUpper(slug), IsPublic: true, Limits: tiers})
	if err != nil {
		t.Fatalf("create plan: %v", err)
	}
	k, secret, err := p.Keys.Create(ctx, "test", apikeys.NewKey{UserID: p.Dev.ID, Name: "e2e key", PlanID: &pl.ID})
	if err != nil {
		t.Fatalf("create key: %v", err)
	}
	return k, secret
}

// eventually polls cond every 50 ms until it holds or within passes.
func eventually(within time.Duration, cond func() bool) (time.Duration, bool) {
	start := time.Now()
	for {
		if cond() {
			return time.Since(start), true
		}
		if time.Since(start) > within {
			return time.Since(start), false
		}
		time.Sleep(50 * time.Millisecond)
	}
}
