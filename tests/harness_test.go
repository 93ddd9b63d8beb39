// Package tests holds Sluice's end-to-end tests: the built portal program on
// real Postgres and Redis, driven by a real headless Chromium and by HTTP
// clients from outside the process.
package tests

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/sampleapi"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/users"
)

const (
	operatorEmail = "operator@example.com"
	devEmail      = "developer@example.com"
	password      = "correct horse battery staple"
	// sessionSecret is the portal's PORTAL_SESSION_SECRET in these tests.
	sessionSecret = "browser-test-session-secret-0123456789"
)

// routes are the sample API's patterns plan tiers may name, as cmd/portal
// passes them to the plans and keys services.
var routes = []string{sampleapi.RouteSearch, sampleapi.RouteItem, sampleapi.RouteCreateReport, sampleapi.RouteJob}

// build is the portal binary this test binary built, once, on first use.
type build struct {
	once sync.Once
	// dir holds the binary; TestMain removes it.
	dir  string
	path string
	err  error
}

// portalBinary is the one build of ./cmd/portal shared by every test of this
// binary: building takes seconds, starting it per test well under one.
var portalBinary build

func TestMain(m *testing.M) {
	code := m.Run()
	if portalBinary.dir != "" {
		_ = os.RemoveAll(portalBinary.dir)
	}
	os.Exit(code)
}

// binary builds ./cmd/portal on first call and returns its path.
func binary(t *testing.T) string {
	t.Helper()
	portalBinary.once.Do(func() {
		start := time.Now()
		root, err := moduleRoot()
		if err != nil {
			portalBinary.err = err
			return
		}
		if portalBinary.dir, err = os.MkdirTemp("", "sluice-e2e-"); err != nil {
			portalBinary.err = fmt.Errorf("temp dir for the portal binary: %w", err)
			return
		}
		goCmd, err := exec.LookPath("go")
		if err != nil {
			goCmd = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
		}
		if err := readSources(goCmd, root); err != nil {
			portalBinary.err = err
			return
		}
		path := filepath.Join(portalBinary.dir, "portal")
		cmd := exec.Command(goCmd, "build", "-o", path, "./cmd/portal")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			portalBinary.err = fmt.Errorf("go build ./cmd/portal: %w\n%s", err, out)
			return
		}
		portalBinary.path = path
		t.Logf("built ./cmd/portal in %v", time.Since(start).Round(time.Millisecond))
	})
	if portalBinary.err != nil {
		t.Fatal(portalBinary.err)
	}
	return portalBinary.path
}

// portalSources lists every file of this module that goes into the portal
// binary: the Go files and embedded files of each package ./cmd/portal
// imports from the module, one per line, with go.mod and go.sum.
const portalSources = `{{if .Module}}{{if .Module.Main}}{{range .GoFiles}}{{$.Dir}}/{{.}}
{{end}}{{range .EmbedFiles}}{{$.Dir}}/{{.}}
{{end}}{{end}}{{end}}`

// readSources reads every file the portal binary is built from. This
// package imports neither web, views nor cmd/portal, so `go test` would
// otherwise key its cached result on this package's own files alone and
// answer "ok (cached)" for a browser test of a UI that has since changed:
// files a test opens are part of the cache key, so reading them makes any
// change to them re-run the tests.
func readSources(goCmd, root string) error {
	cmd := exec.Command(goCmd, "list", "-deps", "-f", portalSources, "./cmd/portal")
	cmd.Dir = root
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("go list -deps ./cmd/portal: %w\n%s", err, stderr.String())
	}
	files := []string{filepath.Join(root, "go.mod"), filepath.Join(root, "go.sum")}
	for line := range strings.Lines(string(out)) {
		if f := strings.TrimSpace(line); f != "" {
			files = append(files, f)
		}
	}
	if len(files) < 10 {
		return fmt.Errorf("go list -deps ./cmd/portal named only %d source files", len(files))
	}
	for _, f := range files {
		if _, err := os.ReadFile(f); err != nil {
			return fmt.Errorf("read the portal's sources: %w", err)
		}
	}
	return nil
}

// moduleRoot is the nearest directory above the working directory (the
// package's, under go test) that holds go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// portal is a running portal program as a test sees it: its URL, and the
// services to arrange data with in the same database.
type portal struct {
	URL   string
	Pool  *pgxpool.Pool
	Plans *plans.Service
	Keys  *apikeys.Service
	Users *users.Repo
	Dev   users.User
	// Redis and Prefix are the test's view of the portal's counters: every
	// key the portal writes starts with Prefix (PORTAL_REDIS_PREFIX).
	Redis  redis.UniversalClient
	Prefix string
	// Log is the file holding the program's stdout and stderr.
	Log string
	// MetricsURL is where the program serves /metrics
	// (PORTAL_METRICS_ADDR, a loopback port of its own).
	MetricsURL string
	// ProxyURL is the reverse proxy's own listener, when the test set
	// PORTAL_PROXY_ADDR.
	ProxyURL string
}

var (
	listeningRE = regexp.MustCompile(`Sluice is listening on (http://\S+)`)
	metricsRE   = regexp.MustCompile(`Metrics are served on (http://\S+)`)
	proxyRE     = regexp.MustCompile(`The reverse proxy is served on (http://\S+)`)
)

// startPortal runs the built portal program for one test: on 127.0.0.1 and a
// free port, over a fresh Postgres database and a private Redis key prefix,
// without the demo plans, with the operator account operatorEmail and a
// developer devEmail. It is stopped with SIGTERM when the test ends and must
// then exit 0 within a few seconds; if the test failed its log is kept in the
// test's artifact directory and its tail printed.
func startPortal(t *testing.T) *portal {
	t.Helper()
	return startPortalWith(t, portalConfig{})
}

// portalConfig changes what startPortalWith gives the program.
type portalConfig struct {
	// redisURL, when set, is the program's REDIS_URL in place of the
	// tests' shared Redis, and rdb the test's own client to it.
	redisURL string
	rdb      redis.UniversalClient
	// env adds to or replaces the program's environment.
	env map[string]string
}

// startPortalWith is startPortal with cfg's changes.
func startPortalWith(t *testing.T, cfg portalConfig) *portal {
	t.Helper()
	bin := binary(t)
	// Registered first, so cleaned up last: the database is dropped and the
	// Redis keys deleted after the program has stopped.
	dbURL := testenv.PostgresURL(t)
	var rdb redis.UniversalClient
	var prefix, redisURL string
	if cfg.redisURL == "" {
		rdb, prefix = testenv.Redis(t)
		redisURL = testenv.RedisURL(t)
	} else {
		// A private Redis the test started: nothing else writes to it.
		rdb, prefix, redisURL = cfg.rdb, "e2e:", cfg.redisURL
	}
	pool, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatalf("open pool: %v", err)
	}
	t.Cleanup(pool.Close)
	artifacts := t.ArtifactDir()
	logPath := filepath.Join(t.TempDir(), "portal.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}

	env := map[string]string{
		"DATABASE_URL":              dbURL,
		"REDIS_URL":                 redisURL,
		"PORTAL_REDIS_PREFIX":       prefix,
		"PORTAL_ADDR":               "127.0.0.1:0",
		"PORTAL_DATA_DIR":           filepath.Join(t.TempDir(), "data"),
		"PORTAL_ADMIN_EMAIL":        operatorEmail,
		"PORTAL_ADMIN_PASSWORD":     password,
		"PORTAL_SESSION_SECRET":     sessionSecret,
		"PORTAL_SHUTDOWN_TIMEOUT":   "10s",
		"PORTAL_LAST_USED_INTERVAL": "1s",
		// These tests check limits, not the failure mode: on a loaded CI
		// machine a 100 ms Redis wait can run out and fail open.
		"PORTAL_REDIS_TIMEOUT": "2s",
		"PORTAL_LOG_LEVEL":     "debug",
		// A port of its own: the default, 127.0.0.1:9464, is one for every
		// portal the tests start at once.
		"PORTAL_METRICS_ADDR": "127.0.0.1:0",
	}
	for k, v := range cfg.env {
		env[k] = v
	}
	cmd := exec.Command(bin, "-no-demo")
	cmd.Env = portalEnv(env)
	cmd.Stderr = logFile
	// If this test binary dies, the portal dies with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	urls := make(chan string, 1)
	metricsURLs := make(chan string, 1)
	proxyURLs := make(chan string, 1)
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logFile, line)
			if m := metricsRE.FindStringSubmatch(line); m != nil {
				select {
				case metricsURLs <- m[1]:
				default:
				}
			}
			if m := proxyRE.FindStringSubmatch(line); m != nil {
				select {
				case proxyURLs <- m[1]:
				default:
				}
			}
			if m := listeningRE.FindStringSubmatch(line); m != nil {
				select {
				case urls <- m[1]:
				default:
				}
			}
		}
		// Drain anything past an overlong line so the program never blocks
		// on a full pipe.
		_, _ = io.Copy(logFile, stdout)
	}()
	exited := make(chan error, 1)
	go func() {
		<-copied // Wait must not close the pipe before it is read out
		exited <- cmd.Wait()
	}()

	p := &portal{Pool: pool, Redis: rdb, Prefix: prefix, Log: logPath}
	t.Cleanup(func() {
		stopPortal(t, cmd, exited)
		_ = logFile.Close()
		checkLog(t, logPath, artifacts)
	})

	select {
	case p.URL = <-urls:
		t.Logf("portal started in %v at %s", time.Since(start).Round(time.Millisecond), p.URL)
		// Printed before the main URL, unless the test turned it off.
		select {
		case p.MetricsURL = <-metricsURLs:
		default:
		}
		select {
		case p.ProxyURL = <-proxyURLs:
		default:
		}
	case err := <-exited:
		exited <- err
		t.Fatalf("the portal exited before listening: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("the portal printed no URL within 60 s")
	}

	logger := slog.New(slog.DiscardHandler)
	p.Plans = plans.NewService(pool, routes, logger).WithReducedAnswers(sampleapi.ReducedAnswerRoutes())
	p.Keys = apikeys.NewService(pool, routes, logger)
	p.Users = users.NewRepo(pool)
	if p.Dev, err = p.Users.Create(context.Background(), users.NewUser{Email: devEmail, Password: password, Role: users.RoleDeveloper}); err != nil {
		t.Fatalf("create developer: %v", err)
	}
	return p
}

// portalEnv is this process's environment without anything that configures
// a portal, plus env: the program under test reads only what the test sets.
func portalEnv(env map[string]string) []string {
	var out []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if name == "DATABASE_URL" || name == "REDIS_URL" || strings.HasPrefix(name, "PORTAL_") {
			continue
		}
		out = append(out, kv)
	}
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}

// stopPortal sends SIGTERM and fails the test unless the program exits 0
// within shutdownWithin. A graceful shutdown may rightly take up to 5 s:
// net/http's Shutdown counts a connection a client dialed but has not sent a
// request on yet (an HTTP client under load dials spares) as active until it
// is 5 s old. So the portal gets PORTAL_SHUTDOWN_TIMEOUT=10s, and the test
// waits a little longer than that; CI caught the 5 s wait it had before.
func stopPortal(t *testing.T, cmd *exec.Cmd, exited chan error) {
	t.Helper()
	const shutdownWithin = 12 * time.Second
	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("SIGTERM the portal: %v", err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("the portal exited with %v after SIGTERM, want status 0", err)
			return
		}
		t.Logf("portal stopped %v after SIGTERM", time.Since(start).Round(time.Millisecond))
	case <-time.After(shutdownWithin):
		_ = cmd.Process.Kill()
		<-exited
		t.Errorf("the portal did not exit within %v of SIGTERM; killed", shutdownWithin)
	}
}

// checkLog fails the test if the program's log holds a secret, and keeps the
// log in the test's artifact directory, printing its tail, when the test
// failed.
func checkLog(t *testing.T, path, artifacts string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("read the portal's log: %v", err)
		return
	}
	for name, secret := range map[string]string{"the admin password": password, "the session secret": sessionSecret} {
		if strings.Contains(string(b), secret) {
			t.Errorf("the portal's log holds %s", name)
		}
	}
	if !t.Failed() {
		return
	}
	kept := filepath.Join(artifacts, "portal.log")
	if err := os.WriteFile(kept, b, 0o644); err != nil {
		t.Errorf("keep the portal's log: %v", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	t.Logf("portal log kept at %s; its last lines:\n%s", kept, strings.Join(lines, "\n"))
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
	// Every page's console is watched for Content-Security-Policy
	// violations: a script, style or connection the policy blocks is a
	// dashboard bug even when no step of the test notices it.
	var mu sync.Mutex
	var violations []string
	watched := make(chan struct{})
	messages := chromedp.Console(ctx)
	go func() {
		defer close(watched)
		for m, err := range messages {
			if err != nil {
				return
			}
			if strings.Contains(m.Text, "Content Security Policy") {
				mu.Lock()
				violations = append(violations, m.URL+": "+m.Text)
				mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		cancelTimeout()
		cancelTab()
		cancelAlloc()
		<-watched
		for _, v := range violations {
			t.Errorf("Content-Security-Policy violation: %s", v)
		}
	})
	return ctx
}

// tid selects an element by its data-testid.
func tid(id string) chromedp.CSS {
	return chromedp.CSS(`[data-testid="` + id + `"]`)
}

// htmxReady waits until the page has loaded and htmx has processed it. A
// click before that submits a form the plain way, reloading the page, which
// is right without JavaScript but not what an inline-edit test is checking;
// on a loaded CI machine the deferred script can run after the first click.
func htmxReady() chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](`document.readyState === "complete" && typeof htmx !== "undefined"`)
}

// htmxBound waits until htmx has processed the element sel matches (its
// internal data carries an initHash once its hx- attributes are bound).
// Content htmx swaps in is processed a moment after it is visible; a click
// in that moment follows the plain href or submits the plain form.
func htmxBound(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](`(() => { const e = document.querySelector(` + strconv.Quote(sel) +
		`); const d = e && e["htmx-internal-data"]; return !!(d && d.initHash); })()`)
}

// do runs actions and fails the test, with a screenshot, on error.
func do(t *testing.T, ctx context.Context, step string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, actions...); err != nil {
		screenshot(t, ctx, "failed-"+step)
		t.Fatalf("%s: %v", step, err)
	}
}

// textOf returns the trimmed text of the first visible element with the
// test id, waiting for one. It finds and reads the element in one
// evaluation: a live stream may replace the element at any moment, and a
// query that finds a node and then reads it in a second call fails with "No
// node with given id found" when the swap lands in between.
func textOf(t *testing.T, ctx context.Context, id string) string {
	t.Helper()
	s, err := readText(ctx, `[data-testid="`+id+`"]`)
	if err != nil {
		screenshot(t, ctx, "failed-text-"+id)
		t.Fatalf("text of %s: %v", id, err)
	}
	return s
}

// readText waits for the first element sel matches to be visible and
// returns its trimmed text, found and read in one evaluation.
func readText(ctx context.Context, sel string) (string, error) {
	type found struct {
		Text string `json:"text"`
	}
	f, err := chromedp.Run(ctx, chromedp.Poll[found](`(() => { const e = document.querySelector(`+strconv.Quote(sel)+
		`); return e && e.getClientRects().length > 0 ? {text: e.innerText} : null; })()`,
		chromedp.WithPollingInterval(50*time.Millisecond)))
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(f.Text), nil
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

// keyOnPlan creates a public plan with the tiers and a key of the developer
// on it, through the services on the portal's database, and waits (at most
// 5 s, consuming nothing) until the running portal accepts the key: it
// learns of both from Postgres NOTIFY.
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
	took, ok := eventually(5*time.Second, func() bool { return apiStatus(t, p.URL, "/api/rate-limit-status", secret) == http.StatusOK })
	if !ok {
		t.Fatalf("the portal did not accept the new key within %v", took)
	}
	t.Logf("the portal accepted the new key %v after it was created", took)
	return k, secret
}

// countersUnderPrefix counts the Redis keys under the test's prefix.
func (p *portal) countersUnderPrefix(t *testing.T) int {
	t.Helper()
	n := 0
	iter := p.Redis.Scan(context.Background(), 0, p.Prefix+"*", 500).Iterator()
	for iter.Next(context.Background()) {
		n++
	}
	if err := iter.Err(); err != nil {
		t.Fatalf("scan %s*: %v", p.Prefix, err)
	}
	return n
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
