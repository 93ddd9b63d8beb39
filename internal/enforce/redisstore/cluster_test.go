package redisstore

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/testenv"
)

// startRedisCluster starts a three-master Redis Cluster of private
// redis-servers in a temporary directory and returns a cluster client.
// Ports are below 32768 and so are their cluster bus ports (port + 10000).
func startRedisCluster(t *testing.T) *redis.ClusterClient {
	t.Helper()
	testenv.Tool(t, "redis-server", "redis-server")
	testenv.Tool(t, "redis-cli", "redis-tools")
	dir := t.TempDir()
	var addrs []string
	for len(addrs) < 3 {
		port := 17000 + int(time.Now().UnixNano()%5000)
		if !free(port) || !free(port+10000) {
			continue
		}
		cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--cluster-enabled", "yes",
			"--cluster-config-file", fmt.Sprintf("%s/nodes-%d.conf", dir, port), "--dir", dir)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		waitFor(t, func() bool {
			c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
			defer c.Close()
			return c.Ping(context.Background()).Err() == nil
		})
		addrs = append(addrs, addr)
	}
	out, err := exec.Command("redis-cli", append(append([]string{"--cluster", "create"}, addrs...),
		"--cluster-replicas", "0", "--cluster-yes")...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, addr := range addrs {
		waitFor(t, func() bool {
			c := redis.NewClient(&redis.Options{Addr: addr})
			defer c.Close()
			info, err := c.ClusterInfo(context.Background()).Result()
			return err == nil && strings.Contains(info, "cluster_state:ok")
		})
	}
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { client.Close() })
	waitFor(t, func() bool {
		return client.ForEachShard(context.Background(), func(ctx context.Context, c *redis.Client) error { return c.Ping(ctx).Err() }) == nil
	})
	return client
}

// free says whether nothing listens on 127.0.0.1:port.
func free(port int) bool {
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// TestRedisStoreOnACluster runs the store on a real three-master Redis
// Cluster: every request's keys share its subject's slot, a batch spread
// over many slots goes out as one script call per subject (a multi-subject
// call would fail with CROSSSLOT), and concurrent decisions stay exact for
// every algorithm, usage included.
func TestRedisStoreOnACluster(t *testing.T) {
	client := startRedisCluster(t)
	// The clock stands still: with Redis TIME a minute's end falling
	// mid-test would reset the fixed window and admit a second round. What
	// is under test here is slots and exactness, not the clock. Every
	// subject is read back, as developers are: none is folded into the
	// others row.
	frozen := time.Now()
	store := newTestRedisStore(t, client, Options{Prefix: "c:", Timeout: 5 * time.Second, UsageTopSubjects: 1 << 20, Now: func() time.Time { return frozen }})
	if !store.onePerScript {
		t.Fatal("a cluster client must get one script call per subject")
	}
	ctx := context.Background()
	const subjects, perSubject, limit = 40, 12, 5
	for _, l := range []enforce.Limit{
		{Name: "fw", Algorithm: enforce.FixedWindow, Limit: limit, Window: time.Minute},
		{Name: "log", Algorithm: enforce.SlidingWindowLog, Limit: limit, Window: time.Minute},
		{Name: "tb", Algorithm: enforce.TokenBucket, Limit: limit, Window: time.Hour},
		{Name: "lb", Algorithm: enforce.LeakyBucket, Limit: limit, Window: time.Hour, Burst: limit - 1},
	} {
		t.Run(string(l.Algorithm), func(t *testing.T) {
			// A second layer shared by every subject's requests, as a plan's
			// endpoint tier is, so each request has two keys in its slot.
			limits := []enforce.Limit{l, {Name: "wide", Algorithm: enforce.SlidingWindowCounter, Limit: 1000, Window: time.Minute}}
			admitted := make([]atomic.Int64, subjects)
			var wg sync.WaitGroup
			errs := make(chan error, subjects*perSubject)
			for s := range subjects {
				for range perSubject {
					wg.Add(1)
					go func() {
						defer wg.Done()
						d, err := store.Allow(ctx, enforce.Request{Subject: fmt.Sprintf("%s:%d", l.Algorithm, s), Route: "GET /x", Limits: limits})
						if err != nil {
							errs <- err
							return
						}
						if d.Allowed {
							admitted[s].Add(1)
						}
					}()
				}
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			for s := range subjects {
				if got := admitted[s].Load(); got != limit {
					t.Errorf("subject %d: %d of %d admitted, want exactly %d", s, got, perSubject, limit)
				}
			}
			usage, err := store.Usage(ctx, []string{fmt.Sprintf("%s:%d", l.Algorithm, 0)}, frozen.Add(-time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			var a, r int64
			for _, p := range usage {
				a, r = a+p.Admitted, r+p.Rejected
			}
			if a != limit || r != perSubject-limit {
				t.Errorf("usage of subject 0: %d admitted, %d rejected, want %d and %d", a, r, limit, perSubject-limit)
			}
		})
	}
	// The subjects above landed on every master.
	var masters atomic.Int64
	err := client.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		n, err := c.DBSize(ctx).Result()
		if n > 0 {
			masters.Add(1)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if masters.Load() != 3 {
		t.Errorf("keys on %d of 3 masters, want all three", masters.Load())
	}
}
