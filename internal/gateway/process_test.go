package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/services"
	"github.com/sluicehq/sluice/internal/testenv"
)

// binary finds a gateway's executable: skipped without it, failed under
// TEST_REQUIRE_SERVICES or CI (which installs nginx and caddy with apt).
func binary(t *testing.T, name string) string {
	t.Helper()
	return testenv.Tool(t, name, name)
}

// freePort returns a port nobody listens on right now, below 32768.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// docConfig reads a configuration docs/gateways.md links and points it at this
// test's servers: the documented addresses are replaced, nothing else.
func docConfig(t *testing.T, name string, replace map[string]string) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	b, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "docs", "gateways", name))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for from, to := range replace {
		if !strings.Contains(s, from) {
			t.Fatalf("%s no longer mentions %q", name, from)
		}
		s = strings.ReplaceAll(s, from, to)
	}
	return s
}

// logBuffer collects a process's output for the failure message.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// start runs cmd until the test ends and waits until addr answers HTTP; it
// returns what the process prints.
func start(t testing.TB, cmd *exec.Cmd, addr string) *logBuffer {
	t.Helper()
	out := &logBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("%s output:\n%s", filepath.Base(cmd.Path), out)
		}
	})
	// Wait for the listener, or for the process to give up; the deadline
	// only bounds a hung start on a loaded machine.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		select {
		case <-exited:
			t.Fatalf("%s exited at start:\n%s", filepath.Base(cmd.Path), out)
		case <-ctx.Done():
			t.Fatalf("%s did not listen on %s:\n%s", filepath.Base(cmd.Path), addr, out)
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return out
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// get sends one request through a gateway.
func get(t *testing.T, method, url, key string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// client sends the tests' requests; its timeout only ends a test whose
// gateway never answers.
var client = &http.Client{Timeout: 2 * time.Minute}

// onPort puts a gateway configuration's documented listen address,
// 127.0.0.1:8000, on addr.
func onPort(t *testing.T, conf, addr string) string {
	t.Helper()
	if !strings.Contains(conf, "127.0.0.1:8000") {
		t.Fatal("the configuration no longer listens on 127.0.0.1:8000")
	}
	return strings.ReplaceAll(conf, "127.0.0.1:8000", addr)
}

// containsLine reports whether conf has a line that is want, indentation
// aside.
func containsLine(conf, want string) bool {
	for line := range strings.Lines(conf) {
		if strings.TrimSpace(line) == want {
			return true
		}
	}
	return false
}

func hostPort(u string) string {
	return strings.TrimPrefix(u, "http://")
}

func itoa(n int) string { return strconv.Itoa(n) }

// portalBuild is the one build of ./cmd/portal this test binary's portal
// processes share; TestMain removes it.
var portalBuild struct {
	once sync.Once
	dir  string
	path string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if portalBuild.dir != "" {
		_ = os.RemoveAll(portalBuild.dir)
	}
	os.Exit(code)
}

// portalBinary builds ./cmd/portal on first call and returns its path.
func portalBinary(t testing.TB) string {
	t.Helper()
	portalBuild.once.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(file), "..", "..")
		dir, err := os.MkdirTemp("", "sluice-gateway-")
		if err != nil {
			portalBuild.err = err
			return
		}
		portalBuild.dir = dir
		path := filepath.Join(dir, "portal")
		cmd := exec.Command("go", "build", "-o", path, "./cmd/portal")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			portalBuild.err = fmt.Errorf("go build ./cmd/portal: %w\n%s", err, out)
			return
		}
		portalBuild.path = path
	})
	if portalBuild.err != nil {
		t.Fatal(portalBuild.err)
	}
	return portalBuild.path
}

// portalProcess is the portal program running in a process of its own, so
// that a test can stop it (SIGSTOP) as a hung host would: its sockets stay
// open and accept connections, and nothing answers.
type portalProcess struct {
	cmd *exec.Cmd
	// Addr is where it serves HTTP, host:port.
	Addr string
	// Secret is a key on the shop plan (see fixture.seed).
	Secret string
}

var listeningRE = regexp.MustCompile(`Sluice is listening on http://(\S+)`)

// startPortalProcess runs the built portal over a fresh database holding
// the fixture's shop service, plan and key, with its counters in memory,
// believing X-Forwarded-For from loopback gateways. It is resumed and
// stopped when the test ends.
func startPortalProcess(t *testing.T) *portalProcess {
	t.Helper()
	bin := portalBinary(t)
	dbURL := testenv.PostgresURL(t)
	pool, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	logger := slog.New(slog.DiscardHandler)
	f := &fixture{pool: pool, logger: logger, plans: plans.NewService(pool, nil, logger),
		keys: apikeys.NewService(pool, nil, logger), services: services.NewRepo(pool)}
	f.seed(t)

	env := []string{}
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if name != "DATABASE_URL" && name != "REDIS_URL" && !strings.HasPrefix(name, "PORTAL_") {
			env = append(env, kv)
		}
	}
	env = append(env, "DATABASE_URL="+dbURL, "PORTAL_ADDR=127.0.0.1:0", "PORTAL_DATA_DIR="+t.TempDir(),
		"PORTAL_TRUSTED_PROXIES=127.0.0.0/8", "PORTAL_SHUTDOWN_TIMEOUT=5s", "PORTAL_METRICS_ADDR=off")
	cmd := exec.Command(bin, "-no-demo")
	cmd.Env = env
	// If this test binary dies, the portal dies with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out := &logBuffer{}
	cmd.Stderr = out
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addrs := make(chan string, 1)
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			fmt.Fprintln(out, sc.Text())
			if m := listeningRE.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addrs <- m[1]:
				default:
				}
			}
		}
		_, _ = io.Copy(out, stdout)
	}()
	exited := make(chan struct{})
	go func() { <-copied; _ = cmd.Wait(); close(exited) }()
	p := &portalProcess{cmd: cmd, Secret: f.secret}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Error("the portal did not stop within 15 s of SIGTERM")
		}
		if t.Failed() {
			t.Logf("portal output:\n%s", out)
		}
	})
	select {
	case p.Addr = <-addrs:
	case <-exited:
		t.Fatalf("the portal exited at start:\n%s", out)
	case <-time.After(time.Minute):
		t.Fatalf("the portal did not listen within a minute:\n%s", out)
	}
	return p
}

// Stop freezes the portal (SIGSTOP) until Resume or the test's end. It
// returns once every thread of the process is stopped: kill returns before
// a busy process's threads have all stopped, and one still running would
// answer the next request.
func (p *portalProcess) Stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	tasks := fmt.Sprintf("/proc/%d/task", p.cmd.Process.Pid)
	deadline := time.Now().Add(30 * time.Second)
	for {
		stopped, err := allStopped(tasks)
		if err != nil {
			t.Fatal(err)
		}
		if stopped {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the portal's threads did not all stop within 30 s of SIGSTOP")
		}
		time.Sleep(time.Millisecond)
	}
}

// allStopped reports whether every thread listed under a /proc/PID/task
// directory is in the stopped state (T).
func allStopped(tasks string) (bool, error) {
	entries, err := os.ReadDir(tasks)
	if err != nil {
		return false, err
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(tasks, e.Name(), "stat"))
		if err != nil {
			return false, err
		}
		// pid (comm) state ...: comm may hold spaces and parentheses.
		rest := string(b[bytes.LastIndexByte(b, ')')+1:])
		if f := strings.Fields(rest); len(f) == 0 || f[0] != "T" {
			return false, nil
		}
	}
	return true, nil
}

// Resume lets a stopped portal run again (SIGCONT).
func (p *portalProcess) Resume(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
}

// failOpen turns a shipped gateway configuration into its documented
// fail-open variant: the lines marked "# fail closed" go, the lines marked
// "# fail open:" are uncommented.
func failOpen(t *testing.T, conf string) string {
	t.Helper()
	var b strings.Builder
	closed, open := 0, 0
	for line := range strings.Lines(conf) {
		if strings.Contains(line, "# fail closed\n") || strings.HasSuffix(line, "# fail closed") {
			closed++
			continue
		}
		if i := strings.Index(line, "# fail open: "); i >= 0 && strings.TrimSpace(line[:i]) == "" {
			open++
			line = line[:i] + line[i+len("# fail open: "):]
		}
		b.WriteString(line)
	}
	if closed == 0 || open == 0 {
		t.Fatalf("the configuration marks %d fail-closed and %d fail-open lines; want both", closed, open)
	}
	return b.String()
}

// stopMargin is how much longer than its configured check timeout a gateway
// may take to answer while the portal is stopped: a bound for a loaded
// machine, not a performance figure (the gateways answered after 30 s,
// 60 s or never before they had a timeout).
const stopMargin = 8 * time.Second

// portalStopped checks two gateways in front of api asking portal, one
// running the shipped (fail-closed) configuration at closedBase and one its
// fail-open variant at openBase: while the portal is stopped, each answers
// within timeout plus stopMargin, the first with a 503 with Retry-After and
// the JSON body, the second with the API's answer marked
// Sluice-RateLimit-Degraded: portal-unavailable. It returns the two answer
// times.
func portalStopped(t *testing.T, p *portalProcess, api *upstream, closedBase, openBase string, timeout time.Duration) (closedTook, openTook time.Duration) {
	t.Helper()
	for _, base := range []string{closedBase, openBase} {
		res := get(t, "GET", base+"/items/1", p.Secret)
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || res.Header.Get("X-RateLimit-Limit") != itoa(itemsLimit) {
			t.Fatalf("%s with the portal running: status %d, X-RateLimit-Limit %q, headers %v, body %q",
				base, res.StatusCode, res.Header.Get("X-RateLimit-Limit"), res.Header, body)
		}
	}
	p.Stop(t)
	bound := timeout + stopMargin

	start := time.Now()
	res := get(t, "GET", closedBase+"/items/2", p.Secret)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	closedTook = time.Since(start)
	var b struct{ Error, Message string }
	if res.StatusCode != http.StatusServiceUnavailable || json.Unmarshal(body, &b) != nil || b.Error != "rate_limit_unavailable" || b.Message == "" {
		t.Errorf("fail closed, portal stopped: status %d body %q, want 503 rate_limit_unavailable", res.StatusCode, body)
	}
	if ra, err := strconv.Atoi(res.Header.Get("Retry-After")); err != nil || ra < 1 {
		t.Errorf("fail closed, portal stopped: Retry-After %q", res.Header.Get("Retry-After"))
	}
	if ct := res.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("fail closed, portal stopped: Content-Type %q", ct)
	}
	if closedTook > bound {
		t.Errorf("fail closed, portal stopped: answered in %v, want within %v (timeout %v)", closedTook, bound, timeout)
	}

	start = time.Now()
	res = get(t, "GET", openBase+"/items/3", p.Secret)
	body, _ = io.ReadAll(res.Body)
	res.Body.Close()
	openTook = time.Since(start)
	if res.StatusCode != http.StatusOK || string(body) != "served GET /items/3" {
		t.Errorf("fail open, portal stopped: status %d body %q, want the API's 200", res.StatusCode, body)
	}
	if got := res.Header.Get("Sluice-RateLimit-Degraded"); got != "portal-unavailable" {
		t.Errorf("fail open, portal stopped: Sluice-RateLimit-Degraded %q, want portal-unavailable", got)
	}
	if openTook > bound {
		t.Errorf("fail open, portal stopped: answered in %v, want within %v (timeout %v)", openTook, bound, timeout)
	}
	noInternalHeaders(t, "portal stopped", res)

	// Resumed, the portal decides again.
	p.Resume(t)
	res = get(t, "POST", closedBase+"/orders", p.Secret)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Errorf("portal resumed: status %d, want 200", res.StatusCode)
	}
	if n := api.served.Load(); n != 4 {
		t.Errorf("the API served %d requests, want 4 (two before the stop, one failed open, one after)", n)
	}
	t.Logf("portal stopped: fail closed answered in %v, fail open in %v (check timeout %v)",
		closedTook.Round(time.Millisecond), openTook.Round(time.Millisecond), timeout)
	return closedTook, openTook
}
