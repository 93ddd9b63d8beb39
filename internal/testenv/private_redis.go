package testenv

import (
	"context"
	"math/rand/v2"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// PrivateRedis is a redis-server of the test's own on a free port below
// 32768, for tests that need several Redis servers (one per region, say) or
// that stop one; the shared Redis is never touched. It is killed when the
// test ends.
type PrivateRedis struct {
	// Addr is host:port.
	Addr string
	cmd  *exec.Cmd
}

// StartPrivateRedis starts a PrivateRedis and waits until it answers.
// Without redis-server the test is skipped, or failed under
// TEST_REQUIRE_SERVICES or CI (see Tool).
func StartPrivateRedis(t testing.TB) *PrivateRedis {
	t.Helper()
	Tool(t, "redis-server", "redis-server")
	p := &PrivateRedis{Addr: freeLocalAddr(t)}
	p.start(t)
	t.Cleanup(p.Stop)
	return p
}

// freeLocalAddr returns 127.0.0.1:port for a port below 32768 (higher ones
// collide with outgoing connections) that nothing listens on now.
func freeLocalAddr(t testing.TB) string {
	t.Helper()
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(20000+rand.IntN(12000)))
		if err != nil {
			continue
		}
		_ = l.Close()
		return l.Addr().String()
	}
	t.Fatal("testenv: no free port below 32768")
	return ""
}

func (p *PrivateRedis) start(t testing.TB) {
	t.Helper()
	_, port, _ := net.SplitHostPort(p.Addr)
	p.cmd = exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no")
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("testenv: start redis-server: %v", err)
	}
	c := redis.NewClient(&redis.Options{Addr: p.Addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("testenv: private redis on %s did not answer: %v", p.Addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop kills the server and waits for it to exit; a stopped server stays
// stopped.
func (p *PrivateRedis) Stop() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
	p.cmd = nil
}

// URL is the server's redis:// URL.
func (p *PrivateRedis) URL() string { return "redis://" + p.Addr }

// Restart starts a stopped server again on the same port, empty.
func (p *PrivateRedis) Restart(t testing.TB) {
	t.Helper()
	p.Stop()
	p.start(t)
}
