package tests

import (
	"context"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/testenv"
)

// freePort returns a port below limit on which nothing listens on
// 127.0.0.1. Test servers stay below 32768, out of the ephemeral range.
func freePort(t *testing.T, limit int) int {
	t.Helper()
	for range 100 {
		port := 20000 + mrand.IntN(limit-20000)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue
		}
		_ = l.Close()
		return port
	}
	t.Fatalf("no free port between 20000 and %d", limit)
	return 0
}

// startRedisProcess starts one private redis-server (or redis-sentinel,
// by program) with args, stopped when the test ends.
func startRedisProcess(t *testing.T, program string, args ...string) {
	t.Helper()
	cmd := exec.Command(program, args...)
	out := filepath.Join(t.TempDir(), "redis.log")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", program, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = f.Close()
		if t.Failed() {
			b, _ := os.ReadFile(out)
			t.Logf("%s %s output:\n%s", program, strings.Join(args, " "), b)
		}
	})
}

// waitPing waits until c answers PING.
func waitPing(t *testing.T, c redis.UniversalClient, what string) {
	t.Helper()
	if _, ok := eventually(20*time.Second, func() bool { return c.Ping(context.Background()).Err() == nil }); !ok {
		t.Fatalf("%s did not answer PING within 20 s: %v", what, c.Ping(context.Background()).Err())
	}
}

// checkLimitsThrough calls the portal's sample API with one key on a plan
// of 3 requests an hour and checks the portal decided in the Redis it was
// given: ready, 3 admitted and 2 rejected with the headers counting down,
// and its keys under its prefix where scan looks (every node of a cluster).
func checkLimitsThrough(t *testing.T, p *portal, scan func(pattern string) []string) {
	t.Helper()
	if status, _ := httpGet(t, p.URL+"/readyz"); status != http.StatusOK {
		t.Fatalf("/readyz answered %d", status)
	}
	_, secret := p.keyOnPlan(t, "three", plans.LimitInput{Name: "items", Route: "GET /api/items/{id}", Algorithm: "sliding_window_log", Limit: 3, WindowSeconds: 3600})
	var got []string
	for range 5 {
		req, _ := http.NewRequest(http.MethodGet, p.URL+"/api/items/1", nil)
		req.Header.Set("Authorization", "Bearer "+secret)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		got = append(got, fmt.Sprintf("%d r=%s", res.StatusCode, res.Header.Get("X-RateLimit-Remaining")))
	}
	if want := "[200 r=2 200 r=1 200 r=0 429 r=0 429 r=0]"; fmt.Sprint(got) != want {
		t.Errorf("five calls on a limit of 3: %v, want %s", got, want)
	}
	if keys := scan(p.Prefix + "*"); len(keys) == 0 {
		t.Errorf("no keys under %s in the Redis the portal was given", p.Prefix)
	}
}

// httpGet returns the status and body of GET url.
func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, string(b)
}

// scanClient lists the keys matching pattern on one server.
func scanClient(t *testing.T, c redis.UniversalClient) func(string) []string {
	return func(pattern string) []string {
		return scanAll(t, context.Background(), c, pattern)
	}
}

// scanAll lists every key matching pattern on the server c talks to.
func scanAll(t *testing.T, ctx context.Context, c redis.UniversalClient, pattern string) []string {
	t.Helper()
	var keys []string
	iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatalf("scan %s: %v", pattern, err)
	}
	return keys
}

// logSays fails the test unless the portal's log has a line containing s.
func logSays(t *testing.T, p *portal, s string) {
	t.Helper()
	b, err := os.ReadFile(p.Log)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), s) {
		t.Errorf("the portal's log does not say %q", s)
	}
}

// testCA is a certificate authority made for one test, and a server
// certificate it signed for 127.0.0.1, as PEM files.
// TestPortalOnTLSRedis: REDIS_URL=rediss://... the portal verifies the
// server's certificate against the system's roots (here SSL_CERT_FILE, a CA
// made for the test), refuses to start when it cannot, and enforces limits
// over the TLS connection.
func TestPortalOnTLSRedis(t *testing.T) {
	srv := testenv.StartTLSRedis(t)
	addr := srv.Addr
	rdb := redis.NewClient(&redis.Options{Addr: addr, TLSConfig: srv.ClientTLS()})
	t.Cleanup(func() { rdb.Close() })
	redisURL := "rediss://" + addr + "/0"

	t.Run("RefusesAnUntrustedCertificate", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, binary(t), "-no-demo")
		cmd.Env = portalEnv(map[string]string{"REDIS_URL": redisURL, "PORTAL_ADDR": "127.0.0.1:0",
			"PORTAL_DATA_DIR": filepath.Join(t.TempDir(), "data"), "SSL_CERT_FILE": filepath.Join(t.TempDir(), "no-such-ca.pem")})
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Fatalf("the portal started on a Redis whose certificate it cannot verify:\n%s", out)
		}
		if !strings.Contains(string(out), "REDIS_URL") || !strings.Contains(string(out), "certificate") {
			t.Errorf("the refusal does not name REDIS_URL and the certificate:\n%s", out)
		}
	})
	t.Run("EnforcesOverTLS", func(t *testing.T) {
		p := startPortalWith(t, portalConfig{redisURL: redisURL, rdb: rdb, env: map[string]string{"SSL_CERT_FILE": srv.CAFile}})
		checkLimitsThrough(t, p, scanClient(t, rdb))
		logSays(t, p, "rate-limit counters: redis server at "+addr)
	})
}

// TestPortalOnRedisSentinel: REDIS_URL names a Sentinel and the master's
// name; the portal asks the Sentinel for the master and enforces limits on
// it.
func TestPortalOnRedisSentinel(t *testing.T) {
	server := testenv.Tool(t, "redis-server", "redis-server")
	sentinel := testenv.Tool(t, "redis-sentinel", "redis-sentinel")
	masterPort := freePort(t, 32768)
	startRedisProcess(t, server, "--port", strconv.Itoa(masterPort), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	master := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(masterPort)})
	t.Cleanup(func() { master.Close() })
	waitPing(t, master, "the master redis-server")

	sentinelPort := freePort(t, 32768)
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	// Sentinel rewrites its configuration file, so it gets one of its own.
	if err := os.WriteFile(conf, fmt.Appendf(nil, "port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor sluice 127.0.0.1 %d 1\n", sentinelPort, dir, masterPort), 0o600); err != nil {
		t.Fatal(err)
	}
	startRedisProcess(t, sentinel, conf)
	sc := redis.NewSentinelClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(sentinelPort)})
	t.Cleanup(func() { sc.Close() })
	if _, ok := eventually(20*time.Second, func() bool {
		addr, err := sc.GetMasterAddrByName(context.Background(), "sluice").Result()
		return err == nil && len(addr) == 2 && addr[1] == strconv.Itoa(masterPort)
	}); !ok {
		t.Fatal("the Sentinel did not name the master within 20 s")
	}

	sentinelAddr := "127.0.0.1:" + strconv.Itoa(sentinelPort)
	p := startPortalWith(t, portalConfig{redisURL: "redis://" + sentinelAddr + "?master_name=sluice", rdb: master})
	checkLimitsThrough(t, p, scanClient(t, master))
	logSays(t, p, "rate-limit counters: redis sentinel at "+sentinelAddr)
}

// TestPortalOnRedisCluster: REDIS_URL=redis+cluster://... with the other
// nodes as addr=; the portal's decisions run on a three-master cluster
// (every key of a subject in its hash-tag slot, or the script would fail
// with CROSSSLOT).
func TestPortalOnRedisCluster(t *testing.T) {
	server := testenv.Tool(t, "redis-server", "redis-server")
	cli := testenv.Tool(t, "redis-cli", "redis-tools")
	dir := t.TempDir()
	var addrs []string
	for len(addrs) < 3 {
		// The cluster bus listens on port+10000, also below 32768.
		port := freePort(t, 22768)
		if slicesContain(addrs, port) || !portFree(port+10000) {
			continue
		}
		startRedisProcess(t, server, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, fmt.Sprintf("nodes-%d.conf", port)), "--dir", dir)
		addr := "127.0.0.1:" + strconv.Itoa(port)
		node := redis.NewClient(&redis.Options{Addr: addr})
		waitPing(t, node, "cluster node "+addr)
		_ = node.Close()
		addrs = append(addrs, addr)
	}
	if out, err := exec.Command(cli, append(append([]string{"--cluster", "create"}, addrs...), "--cluster-replicas", "0", "--cluster-yes")...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { cluster.Close() })
	if _, ok := eventually(30*time.Second, func() bool {
		for _, addr := range addrs {
			node := redis.NewClient(&redis.Options{Addr: addr})
			info, err := node.ClusterInfo(context.Background()).Result()
			_ = node.Close()
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				return false
			}
		}
		return true
	}); !ok {
		t.Fatal("the cluster did not reach cluster_state:ok within 30 s")
	}

	redisURL := "redis+cluster://" + addrs[0] + "?addr=" + addrs[1] + "&addr=" + addrs[2]
	p := startPortalWith(t, portalConfig{redisURL: redisURL, rdb: cluster})
	checkLimitsThrough(t, p, func(pattern string) []string {
		// ForEachMaster calls each master's function at once.
		var mu sync.Mutex
		var keys []string
		err := cluster.ForEachMaster(context.Background(), func(ctx context.Context, c *redis.Client) error {
			iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
			for iter.Next(ctx) {
				mu.Lock()
				keys = append(keys, iter.Val())
				mu.Unlock()
			}
			return iter.Err()
		})
		if err != nil {
			t.Fatalf("scan the cluster: %v", err)
		}
		return keys
	})
	logSays(t, p, "rate-limit counters: redis cluster at "+strings.Join(addrs, ","))
}

// portFree says whether nothing listens on 127.0.0.1:port.
func portFree(port int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// slicesContain says whether addrs holds 127.0.0.1:port.
func slicesContain(addrs []string, port int) bool {
	for _, a := range addrs {
		if a == "127.0.0.1:"+strconv.Itoa(port) {
			return true
		}
	}
	return false
}
