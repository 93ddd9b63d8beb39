package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/db"
	"github.com/sluicehq/sluice/internal/database"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/testenv"
)

// portal is a run() in progress.
type portal struct {
	url    string
	out    *lockedBuffer
	cancel context.CancelFunc
	done   chan error
}

// lockedBuffer collects run's stdout while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

var listeningRE = regexp.MustCompile(`Sluice is listening on (http://\S+)`)

// startPortal runs the program in-process with env and waits until it
// prints its URL.
func startPortal(t *testing.T, env map[string]string, args ...string) *portal {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	p := &portal{out: &lockedBuffer{}, cancel: cancel, done: make(chan error, 1)}
	go func() {
		err := run(ctx, append([]string{"portal"}, args...), envOf(env), pw)
		_ = pw.Close()
		p.done <- err
	}()
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(p.out, line)
			if m := listeningRE.FindStringSubmatch(line); m != nil {
				urls <- m[1]
			}
		}
	}()
	t.Cleanup(func() { p.stop(t) })
	select {
	case p.url = <-urls:
		return p
	case err := <-p.done:
		p.done <- err
		t.Fatalf("run returned before listening: %v\n%s", err, p.out)
	case <-time.After(90 * time.Second):
		t.Fatalf("no URL printed in time:\n%s", p.out)
	}
	return nil
}

// stop cancels run (as SIGINT would) and returns its error.
func (p *portal) stop(t *testing.T) error {
	t.Helper()
	p.cancel()
	select {
	case err := <-p.done:
		p.done <- err
		return err
	case <-time.After(60 * time.Second):
		t.Fatalf("run did not return after cancel:\n%s", p.out)
		return nil
	}
}

// metricsURL is the /metrics URL the portal printed (PORTAL_METRICS_ADDR);
// it prints it before its main URL, which startPortal has waited for.
func (p *portal) metricsURL(t *testing.T) string {
	t.Helper()
	m := metricsRE.FindStringSubmatch(p.out.String())
	if m == nil {
		t.Fatalf("no metrics address printed:\n%s", p.out)
	}
	return m[1]
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func baseEnv(t *testing.T) map[string]string {
	return map[string]string{
		"PORTAL_ADDR":     "127.0.0.1:0",
		"PORTAL_DATA_DIR": filepath.Join(t.TempDir(), "data"),
		// The default, 127.0.0.1:9464, is one port for every portal the
		// tests start at once.
		"PORTAL_METRICS_ADDR": "127.0.0.1:0",
	}
}

func TestRunServesAndShutsDown(t *testing.T) {
	env := baseEnv(t)
	env["DATABASE_URL"] = testenv.PostgresURL(t)
	env["REDIS_URL"] = testenv.RedisURL(t)
	// The test's own prefix: the default, sluice:, is production's, and
	// keys left under it in a shared Redis would be nobody's to delete.
	rdb, prefix := testenv.Redis(t)
	env["PORTAL_REDIS_PREFIX"] = prefix
	p := startPortal(t, env)

	tests := []struct {
		path       string
		wantStatus int
		wantBody   string
	}{
		{"/healthz", 200, "ok\n"},
		{"/readyz", 200, `{"status":"ok","checks":{"postgres":"ok","redis":"ok"}}` + "\n"},
		{"/metrics", 404, ""}, // on its own listener: see below
		{"/", 200, "Sluice"},
		{"/nope", 404, "There is nothing here."},
		// every surface is mounted: the sample API behind the middleware,
		// the generated docs, the admin API (token required), the UI
		{"/api/items/1", 200, `"id":1`},
		{"/api/rate-limit-status", 200, `"plan":"anonymous"`},
		{"/docs/limits.md", 200, "anonymous"},
		{"/admin/api/v1/openapi.json", 200, `"openapi": "3.1`},
		{"/admin/api/v1/plans", 401, "problem"},
		{"/signin", 200, "Sign in"},
	}
	for _, tt := range tests {
		t.Run("GET "+tt.path, func(t *testing.T) {
			status, body := get(t, p.url+tt.path)
			if status != tt.wantStatus || !strings.Contains(body, tt.wantBody) {
				t.Errorf("status %d body %q; want %d containing %q", status, body, tt.wantStatus, tt.wantBody)
			}
		})
	}

	t.Run("GET /metrics on its own listener", func(t *testing.T) {
		status, body := get(t, p.metricsURL(t))
		if status != 200 || !strings.Contains(body, "go_goroutines") || !strings.Contains(body, "process_start_time_seconds") {
			t.Errorf("status %d body %.200q; want 200 with the Go and process collectors", status, body)
		}
	})

	t.Run("CountersUnderTheTestsPrefix", func(t *testing.T) {
		// The sample API calls above were decided in Redis; testenv deletes
		// everything under prefix when the test ends.
		n := 0
		iter := rdb.Scan(t.Context(), 0, prefix+"*", 1000).Iterator()
		for iter.Next(t.Context()) {
			n++
		}
		if err := iter.Err(); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Errorf("no Redis keys under %s after the sample API was called", prefix)
		}
	})

	t.Run("HealthcheckCommand", func(t *testing.T) {
		var out strings.Builder
		addr := strings.TrimPrefix(p.url, "http://")
		if err := run(context.Background(), []string{"portal", "healthcheck", "-addr", addr}, envOf(nil), &out); err != nil {
			t.Errorf("healthcheck on a ready portal: %v", err)
		}
		if !strings.Contains(out.String(), `"status":"ok"`) {
			t.Errorf("healthcheck printed %q", out.String())
		}
		if err := run(context.Background(), []string{"portal", "healthcheck", "-addr", "127.0.0.1:1"}, envOf(nil), io.Discard); err == nil {
			t.Error("healthcheck against nothing succeeded")
		}
	})

	t.Run("PrintsTheGeneratedPasswordOnce", func(t *testing.T) {
		out := p.out.String()
		m := regexp.MustCompile(`password: (\S{24})\n`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no generated password on stdout:\n%s", out)
		}
		if strings.Count(out, m[1]) != 1 {
			t.Errorf("password appears %d times on stdout, want once", strings.Count(out, m[1]))
		}
	})

	t.Run("ShutsDownCleanlyOnCancel", func(t *testing.T) {
		if err := p.stop(t); err != nil {
			t.Fatalf("run returned %v, want nil", err)
		}
		if _, err := http.Get(p.url + "/healthz"); err == nil {
			t.Error("still serving after run returned")
		}
	})

	t.Run("SecondStartCreatesNothing", func(t *testing.T) {
		again := startPortal(t, env)
		if err := again.stop(t); err != nil {
			t.Fatal(err)
		}
		out := again.out.String()
		if strings.Contains(out, "password:") || strings.Contains(out, "seeded") || strings.Contains(out, "migrated") {
			t.Errorf("second start created something:\n%s", out)
		}
	})
}

// TestRunEmbedded is `go run ./cmd/portal` on a fresh machine: no
// DATABASE_URL, no REDIS_URL. As root, this is the path that runs Postgres
// as nobody.
func TestRunEmbedded(t *testing.T) {
	dir := t.TempDir()
	for p := dir; p != os.TempDir() && p != "/"; p = filepath.Dir(p) {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{"PORTAL_ADDR": "127.0.0.1:0", "PORTAL_DATA_DIR": filepath.Join(dir, "data")}

	first := startPortal(t, env)
	if status, body := get(t, first.url+"/readyz"); status != 200 || body != `{"status":"ok","checks":{"postgres":"ok"}}`+"\n" {
		t.Errorf("readyz = %d %q", status, body)
	}
	if !strings.Contains(first.out.String(), "in-memory store") {
		t.Errorf("logs do not say counters are in memory:\n%s", first.out)
	}
	// PORTAL_MEMORY_MAX_SUBJECTS unset: the bound follows memory, and the
	// log says which it chose and from what.
	auto := memstore.ProcessMemory()
	if want := fmt.Sprintf("subject bound chosen by memory (PORTAL_MEMORY_MAX_SUBJECTS=auto)\" max_subjects=%d memory_bytes=%d memory_source=%q",
		memstore.MaxSubjectsFor(auto.Bytes), auto.Bytes, auto.Source); !strings.Contains(first.out.String(), want) {
		t.Errorf("logs do not give the subject bound chosen by memory (%s):\n%s", want, first.out)
	}
	if err := first.stop(t); err != nil {
		t.Fatal(err)
	}

	env["PORTAL_MEMORY_MAX_SUBJECTS"] = "200000"
	second := startPortal(t, env)
	if status, _ := get(t, second.url+"/readyz"); status != 200 {
		t.Errorf("second start readyz = %d", status)
	}
	if want := "subject bound from PORTAL_MEMORY_MAX_SUBJECTS\" max_subjects=200000"; !strings.Contains(second.out.String(), want) {
		t.Errorf("logs do not give the subject bound set (%s):\n%s", want, second.out)
	}
	if out := second.out.String(); strings.Contains(out, "creating embedded postgres") || strings.Contains(out, "password:") {
		t.Errorf("second start did not reuse the data:\n%s", out)
	}
	if err := second.stop(t); err != nil {
		t.Fatal(err)
	}
}

func TestRunBadInput(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	pgURL := testenv.PostgresURL(t)

	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"WrongDatabaseURL", map[string]string{"DATABASE_URL": "postgres://postgres:hunter2@127.0.0.1:1/none?connect_timeout=2"}, "DATABASE_URL: connect to postgres at 127.0.0.1:1/none"},
		{"UnknownDatabase", map[string]string{"DATABASE_URL": noSuchDatabase(t, pgURL)}, "DATABASE_URL: connect to postgres"},
		{"UnreachableRedis", map[string]string{"DATABASE_URL": pgURL, "REDIS_URL": "redis://:hunter2@127.0.0.1:1/0"}, "REDIS_URL: cannot reach redis server at 127.0.0.1:1"},
		{"UnreachableRedisEmbeddedMode", map[string]string{"REDIS_URL": "redis://127.0.0.1:1/0"}, "REDIS_URL: cannot reach redis server at 127.0.0.1:1"},
		{"PortInUse", map[string]string{"PORTAL_ADDR": busy.Addr().String()}, "PORTAL_ADDR: cannot listen on " + busy.Addr().String() + ": bind: address already in use; set PORTAL_ADDR"},
		{"UnwritableDataDir", map[string]string{"PORTAL_DATA_DIR": filepath.Join(file, "data")}, "PORTAL_DATA_DIR: cannot create " + filepath.Join(file, "data")},
		{"BadVariable", map[string]string{"PORTAL_INSTANCES": "zero"}, "invalid PORTAL_INSTANCES"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := baseEnv(t)
			for k, v := range tt.env {
				env[k] = v
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var out strings.Builder
			err := run(ctx, []string{"portal"}, envOf(env), &out)
			if err == nil {
				t.Fatal("run succeeded")
			}
			msg := err.Error()
			if !strings.Contains(msg, tt.want) || strings.Contains(msg, "\n") || strings.Contains(msg, "hunter2") {
				t.Errorf("error %q\nwant one line containing %q and no secret", msg, tt.want)
			}
			if strings.Contains(out.String(), "listening") {
				t.Errorf("printed a URL although it failed:\n%s", out.String())
			}
			if _, err := os.Stat(env["PORTAL_DATA_DIR"]); err == nil {
				t.Errorf("a failed first start left its data dir %s behind", env["PORTAL_DATA_DIR"])
			}
		})
	}
}

func TestRunRefusesBadSchema(t *testing.T) {
	ctx := context.Background()
	latest, err := database.LatestVersion()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		force int
		dirty bool
		args  []string
		want  error
	}{
		{"Dirty", int(latest), true, nil, database.ErrDirtySchema},
		{"Newer", int(latest) + 1, false, nil, database.ErrSchemaTooNew},
		{"OlderWithoutMigrate", int(latest) - 1, false, []string{"-migrate=false"}, database.ErrSchemaTooOld},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url := testenv.PostgresURL(t)
			pool, err := pgxpool.New(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			if err := database.ForceVersion(ctx, pool, tt.force); err != nil {
				t.Fatal(err)
			}
			if tt.dirty {
				if _, err := pool.Exec(ctx, "UPDATE schema_migrations SET dirty = true"); err != nil {
					t.Fatal(err)
				}
			}
			pool.Close()
			env := baseEnv(t)
			env["DATABASE_URL"] = url
			err = run(ctx, append([]string{"portal"}, tt.args...), envOf(env), io.Discard)
			if !errors.Is(err, tt.want) || !strings.HasPrefix(err.Error(), "refusing to serve: ") {
				t.Errorf("run = %v, want refusing to serve: %v", err, tt.want)
			}
		})
	}
}

func TestMigrateCommand(t *testing.T) {
	latest, err := database.LatestVersion()
	if err != nil {
		t.Fatal(err)
	}
	env := baseEnv(t)
	env["DATABASE_URL"] = testenv.PostgresURL(t)
	steps := []struct {
		args    []string
		wantOut string
		wantErr string
	}{
		{[]string{"version"}, fmt.Sprintf("schema version %d; this program knows up to %d\n", latest, latest), ""},
		{[]string{"down", "all"}, fmt.Sprintf("schema version 0; this program knows up to %d\n", latest), ""},
		{[]string{"up"}, fmt.Sprintf("schema version %d; this program knows up to %d\n", latest, latest), ""},
		// Numbers may skip (they are reserved per branch): one step down
		// lands on the previous migration file's number.
		{[]string{"down"}, fmt.Sprintf("schema version %d; this program knows up to %d\n", previousMigration(t, latest), latest), ""},
		{[]string{"force", fmt.Sprint(latest)}, fmt.Sprintf("schema version %d; this program knows up to %d\n", latest, latest), ""},
		{[]string{"sideways"}, "", "unknown migrate action \"sideways\""},
		{[]string{"down", "-3"}, "", "want a number of steps"},
		{nil, "", "migrate needs an action"},
	}
	for _, s := range steps {
		t.Run(strings.Join(append([]string{"migrate"}, s.args...), " "), func(t *testing.T) {
			var out strings.Builder
			err := run(context.Background(), append([]string{"portal", "migrate"}, s.args...), envOf(env), &out)
			if s.wantErr != "" {
				var ue usageError
				if err == nil || !strings.Contains(err.Error(), s.wantErr) || !errors.As(err, &ue) {
					t.Errorf("error = %v, want a usage error containing %q", err, s.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := lastLine(out.String()); got != s.wantOut {
				t.Errorf("output %q, want %q", got, s.wantOut)
			}
		})
	}
}

func lastLine(s string) string {
	lines := strings.SplitAfter(strings.TrimRight(s, "\n")+"\n", "\n")
	return lines[len(lines)-2]
}

func TestReadyzNamesTheFailingDependency(t *testing.T) {
	ctx := context.Background()
	goodPool := testenv.Postgres(t)
	goodRedis, _ := testenv.Redis(t)
	deadPool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:1/x?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	defer deadPool.Close()
	deadRedis := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer deadRedis.Close()

	tests := []struct {
		name       string
		pool       *pgxpool.Pool
		rdb        redis.UniversalClient
		wantStatus int
		want       readiness
	}{
		{"AllUp", goodPool, goodRedis, 200, readiness{Status: "ok", Checks: map[string]string{"postgres": "ok", "redis": "ok"}}},
		{"NoRedisConfigured", goodPool, nil, 200, readiness{Status: "ok", Checks: map[string]string{"postgres": "ok"}}},
		{"PostgresDown", deadPool, goodRedis, 503, readiness{Status: "unavailable", Failing: []string{"postgres"}, Checks: map[string]string{"postgres": "unreachable", "redis": "ok"}}},
		{"RedisDown", goodPool, deadRedis, 503, readiness{Status: "unavailable", Failing: []string{"redis"}, Checks: map[string]string{"postgres": "ok", "redis": "unreachable"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{header: http.Header{}}
			req, _ := http.NewRequestWithContext(ctx, "GET", "/readyz", nil)
			var rdb redis.UniversalClient
			if tt.rdb != nil {
				rdb = tt.rdb
			}
			readyz(tt.pool, rdb, discardLogger()).ServeHTTP(rec, req)
			var got readiness
			if err := json.Unmarshal([]byte(rec.body.String()), &got); err != nil {
				t.Fatalf("body %q: %v", rec.body.String(), err)
			}
			if rec.status != tt.wantStatus || got.Status != tt.want.Status || fmt.Sprint(got.Failing) != fmt.Sprint(tt.want.Failing) ||
				fmt.Sprint(got.Checks) != fmt.Sprint(tt.want.Checks) {
				t.Errorf("got %d %+v, want %d %+v", rec.status, got, tt.wantStatus, tt.want)
			}
		})
	}
}

// noSuchDatabase is the URL of a database that does not exist on the
// server the tests use, whichever that is (CI's, a local one, the
// embedded one).
func noSuchDatabase(t *testing.T, pgURL string) string {
	t.Helper()
	u, err := url.Parse(pgURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/sluice_no_such_db_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	return u.String()
}

// previousMigration is the number of the newest embedded migration before v.
func previousMigration(t *testing.T, v uint) uint {
	t.Helper()
	entries, err := fs.ReadDir(db.Migrations, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	var prev uint
	for _, e := range entries {
		num, _, _ := strings.Cut(e.Name(), "_")
		if n, err := strconv.ParseUint(num, 10, 64); err == nil && uint(n) < v {
			prev = max(prev, uint(n))
		}
	}
	return prev
}
