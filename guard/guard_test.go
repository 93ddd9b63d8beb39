package guard_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/guard"
	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/gateway"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/requestlog"
	"github.com/sluicehq/sluice/internal/services"
	"github.com/sluicehq/sluice/internal/snapshot"
	"github.com/sluicehq/sluice/internal/testenv"
)

const actor = "user:1"

// portal is the part of a running portal the guard talks to: the control
// plane in Postgres, the snapshot holder and the policy feed.
type portal struct {
	url    string
	token  string
	plans  *plans.Service
	keys   *apikeys.Service
	plan   plans.Plan
	key    apikeys.Key
	secret string
	holder *snapshot.Holder
	// reqlog is the request log the guards report their decisions to.
	reqlog *requestlog.Writer
	pool   *pgxpool.Pool
}

func newPortal(t *testing.T) *portal {
	t.Helper()
	ctx := context.Background()
	pool := testenv.Postgres(t)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	p := &portal{plans: plans.NewService(pool, nil, logger), keys: apikeys.NewService(pool, nil, logger)}
	repo := services.NewRepo(pool)
	if _, err := repo.Create(ctx, actor, services.Input{Slug: "app", Name: "App", Routes: []string{"GET /items/{id}"}}); err != nil {
		t.Fatal(err)
	}
	var err error
	if _, p.token, err = repo.CreateToken(ctx, actor, "app", "test"); err != nil {
		t.Fatal(err)
	}
	p.plan, err = p.plans.Create(ctx, actor, plans.PlanInput{Slug: "basic", Name: "Basic", IsDefault: true,
		Limits: []plans.LimitInput{{Name: "items", Route: "GET /items/{id}", Algorithm: "fixed_window", Limit: 3, WindowSeconds: 3600}}})
	if err != nil {
		t.Fatal(err)
	}
	var dev int64
	if err := pool.QueryRow(ctx, `INSERT INTO users (email, password_hash, role) VALUES ('g@example.com', 'x', 'developer') RETURNING id`).Scan(&dev); err != nil {
		t.Fatal(err)
	}
	if p.key, p.secret, err = p.keys.Create(ctx, actor, apikeys.NewKey{UserID: dev, Name: "k"}); err != nil {
		t.Fatal(err)
	}
	h := snapshot.NewHolder(pool, logger, snapshot.Options{Coalesce: time.Millisecond})
	if err := h.Load(ctx); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = h.Run(runCtx) }()
	mux := http.NewServeMux()
	mux.Handle(gateway.PolicyPath, gateway.NewPolicyFeed(gateway.SnapshotPolicy(h), repo, logger))
	p.pool = pool
	p.reqlog = requestlog.NewWriter(pool, requestlog.Options{AdmitSample: 1, Logger: logger})
	mux.Handle(gateway.GuardLogPath, gateway.NewGuardLog(repo, p.reqlog, logger))
	srv := httptest.NewServer(mux)
	t.Cleanup(func() { srv.Close(); cancel(); <-done })
	p.url, p.holder = srv.URL, h
	return p
}

func TestPolicyFeedRefusesBadTokens(t *testing.T) {
	p := newPortal(t)
	for name, token := range map[string]string{"None": "", "Unknown": "sluice_svc_nope", "NotAServiceToken": p.secret} {
		t.Run(name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", p.url+gateway.PolicyPath, nil)
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusUnauthorized || strings.Contains(string(body), "hash") {
				t.Errorf("status %d body %q, want 401 and no policy", res.StatusCode, body)
			}
		})
	}
	if _, err := guard.New(context.Background(), guard.Options{PortalURL: p.url, Token: "sluice_svc_nope"}); err != guard.ErrUnauthorized {
		t.Errorf("guard.New with a bad token = %v, want ErrUnauthorized", err)
	}
}

// TestProgramInAnotherModule builds testdata/app, a module of its own that
// imports guard, runs it against the portal with counters in Redis, and
// watches it enforce the limit, then a plan edit, then a key revocation.
func TestProgramInAnotherModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program with the go command")
	}
	p := newPortal(t)
	_, redisPrefix := testenv.Redis(t)
	redisURL, err := url.Parse(testenv.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	bin := buildApp(t)
	addr := freeAddr(t)
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "SLUICE_URL="+p.url, "SLUICE_SERVICE_TOKEN="+p.token,
		"SLUICE_REDIS_ADDR="+redisURL.Host, "SLUICE_REDIS_PREFIX="+redisPrefix, "APP_ADDR="+addr)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("app output:\n%s", out.String())
		}
	})
	waitListening(t, addr)

	call := func() *http.Response {
		req, _ := http.NewRequest("GET", "http://"+addr+"/items/7", nil)
		req.Header.Set("Authorization", "Bearer "+p.secret)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res
	}
	for i := range 3 {
		if res := call(); res.StatusCode != http.StatusOK || res.Header.Get("X-RateLimit-Limit") != "3" {
			t.Fatalf("request %d: status %d limit %q, want 200 under the limit of 3", i, res.StatusCode, res.Header.Get("X-RateLimit-Limit"))
		}
	}
	if res := call(); res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") == "" {
		t.Fatalf("fourth request: status %d, want 429 with Retry-After", res.StatusCode)
	}

	// until calls the app until it answers as want says, and reports how
	// long the change took to arrive (a figure, not a bound: the guard
	// long-polls for 30 s, so any change seen sooner came by push).
	until := func(what string, want func(*http.Response) bool) {
		t.Helper()
		start := time.Now()
		deadline := time.Now().Add(25 * time.Second)
		for {
			if want(call()) {
				t.Logf("%s reached the program in %v", what, time.Since(start).Round(time.Millisecond))
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never reached the program", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	in := p.plan.Input()
	in.Limits[0].Limit = 10
	if _, err := p.plans.Update(context.Background(), actor, p.plan.ID, p.plan.Version, in); err != nil {
		t.Fatal(err)
	}
	until("the plan edit", func(res *http.Response) bool {
		return res.StatusCode == http.StatusOK && res.Header.Get("X-RateLimit-Limit") == "10"
	})

	if err := p.keys.Revoke(context.Background(), actor, p.key.ID); err != nil {
		t.Fatal(err)
	}
	until("the key revocation", func(res *http.Response) bool { return res.StatusCode == http.StatusUnauthorized })
}

// buildApp copies testdata/app to a directory of its own, points its
// replace directive at this checkout and builds it with the go command.
func buildApp(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	root, err := filepath.Abs(filepath.Join(filepath.Dir(file), ".."))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, name := range []string{"main.go", "go.mod"} {
		b, err := os.ReadFile(filepath.Join(root, "guard", "testdata", "app", name))
		if err != nil {
			t.Fatal(err)
		}
		s := strings.ReplaceAll(string(b), "=> ../../..", "=> "+root)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	goCmd := filepath.Join(runtime.GOROOT(), "bin", "go")
	for _, args := range [][]string{{"mod", "tidy"}, {"build", "-o", "app", "."}} {
		cmd := exec.Command(goCmd, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	return filepath.Join(dir, "app")
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func waitListening(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the app never listened on %s", addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
