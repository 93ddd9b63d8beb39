package gateway_test

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

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

// start runs cmd until the test ends and waits until addr answers HTTP.
func start(t testing.TB, cmd *exec.Cmd, addr string) {
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
			return
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
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func hostPort(u string) string {
	return strings.TrimPrefix(u, "http://")
}

func itoa(n int) string { return strconv.Itoa(n) }
