package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/storetest"
)

// privateRedis is a redis-server started for one test, for what must never
// run on the shared server (SCRIPT FLUSH, CONFIG RESETSTAT, a restart).
type privateRedis struct {
	t    *testing.T
	port int
	cmd  *exec.Cmd
}

// startPrivateRedis starts redis-server on a free port below 32768 without
// persistence; it is stopped when the test ends.
func startPrivateRedis(t *testing.T) *privateRedis {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server is needed for this test: %v", err)
	}
	for attempt := 0; attempt < 20; attempt++ {
		port := 20000 + int(time.Now().UnixNano()%12000)
		if !free(port) {
			continue
		}
		r := &privateRedis{t: t, port: port}
		if r.start() == nil {
			t.Cleanup(r.stop)
			return r
		}
	}
	t.Fatal("no free port for a private redis-server")
	return nil
}

func (r *privateRedis) addr() string { return fmt.Sprintf("127.0.0.1:%d", r.port) }

func (r *privateRedis) start() error {
	r.cmd = exec.Command("redis-server", "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no")
	if err := r.cmd.Start(); err != nil {
		return err
	}
	c := redis.NewClient(&redis.Options{Addr: r.addr()})
	defer c.Close()
	for i := 0; i < 100; i++ {
		if c.Ping(context.Background()).Err() == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.stop()
	return fmt.Errorf("redis-server on port %d did not answer", r.port)
}

func (r *privateRedis) stop() {
	if r.cmd == nil || r.cmd.Process == nil {
		return
	}
	r.cmd.Process.Kill()
	r.cmd.Wait()
	r.cmd = nil
}

// signal sends sig to the server: SIGSTOP freezes it, SIGCONT resumes it.
func (r *privateRedis) signal(sig os.Signal) {
	if r.cmd != nil && r.cmd.Process != nil {
		r.cmd.Process.Signal(sig)
	}
}

func (r *privateRedis) client() *redis.Client {
	// One dial attempt: a stopped server should fail a call at once rather
	// than after go-redis's default five dials 100 ms apart.
	c := redis.NewClient(&redis.Options{Addr: r.addr(), MaxRetries: -1, DialerRetries: 1})
	r.t.Cleanup(func() { c.Close() })
	return c
}

// everyAlgorithm is one limit of each algorithm, all admitting the request.
func everyAlgorithm() []enforce.Limit {
	return []enforce.Limit{
		{Name: "fw", Algorithm: enforce.FixedWindow, Limit: 10, Window: time.Minute},
		{Name: "log", Algorithm: enforce.SlidingWindowLog, Limit: 10, Window: time.Minute},
		{Name: "swc", Algorithm: enforce.SlidingWindowCounter, Limit: 10, Window: time.Minute},
		{Name: "tb", Algorithm: enforce.TokenBucket, Limit: 10, Window: time.Minute},
		{Name: "lb", Algorithm: enforce.LeakyBucket, Limit: 10, Window: time.Minute, Burst: 5, Mode: enforce.ModeQueue},
	}
}

func TestRedisStoreKeys(t *testing.T) {
	client, prefix := storetest.Redis(t)
	store := newTestRedisStore(t, client, Options{Prefix: prefix, Timeout: 2 * time.Second})
	ctx := context.Background()
	subject := "key:42"
	d, err := store.Allow(ctx, enforce.Request{Subject: subject, Route: "GET /api/items/{id}", Limits: everyAlgorithm()})
	if err != nil || !d.Allowed {
		t.Fatalf("Allow = %+v, %v; want admitted", d, err)
	}
	// Usage writes the usage counted in memory so far.
	if _, err := store.Usage(ctx, []string{subject}, time.Now().Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	keys, err := client.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	// fw, swc, tb, lb: fields of the subject's one hash; the sliding log
	// one key; usage one.
	if len(keys) != 3 {
		t.Fatalf("keys written = %d %q, want 3", len(keys), keys)
	}
	for _, k := range keys {
		t.Run(strings.TrimPrefix(k, prefix), func(t *testing.T) {
			if tag := prefix + "{" + subject + "}"; !strings.HasPrefix(k, tag) {
				t.Errorf("key %q lacks the hash tag %q", k, tag)
			}
			ttl, err := client.PTTL(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			if ttl <= 0 {
				t.Errorf("PTTL(%q) = %s, want a TTL", k, ttl)
			}
		})
	}
}

// snapshot returns every key under prefix with its serialized value.
func snapshot(t *testing.T, client redis.UniversalClient, prefix string) map[string]string {
	t.Helper()
	ctx := context.Background()
	keys, err := client.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	// Each key's type and contents, read by type rather than with DUMP,
	// which miniredis (the fallback without a Redis) has only for strings.
	out := make(map[string]string, len(keys))
	for _, k := range keys {
		typ, err := client.Type(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		var v string
		switch typ {
		case "hash":
			var m map[string]string
			if m, err = client.HGetAll(ctx, k).Result(); err == nil {
				v = fmt.Sprint(m) // fmt sorts map keys
			}
		case "zset":
			var z []redis.Z
			if z, err = client.ZRangeWithScores(ctx, k, 0, -1).Result(); err == nil {
				v = fmt.Sprint(z)
			}
		case "string":
			v, err = client.Get(ctx, k).Result()
		default:
			t.Fatalf("key %s has type %s, which snapshot does not read", k, typ)
		}
		if err != nil {
			t.Fatal(err)
		}
		out[k] = typ + ":" + v
	}
	return out
}

func sameSnapshot(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestRedisStoreWritesNothingItDoesNotConsume(t *testing.T) {
	client, prefix := storetest.Redis(t)
	store := newTestRedisStore(t, client, Options{Prefix: prefix, Timeout: 2 * time.Second, DisableUsage: true})
	ctx := context.Background()
	limits := everyAlgorithm()
	req := enforce.Request{Subject: "ip:192.0.2.1", Limits: limits}

	t.Run("PeekOnFreshSubject", func(t *testing.T) {
		if _, err := store.Peek(ctx, req); err != nil {
			t.Fatal(err)
		}
		if got := snapshot(t, client, prefix); len(got) != 0 {
			t.Errorf("Peek wrote %d keys, want none", len(got))
		}
	})
	if _, err := store.Allow(ctx, req); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, client, prefix)
	t.Run("PeekAfterAllow", func(t *testing.T) {
		if _, err := store.Peek(ctx, req); err != nil {
			t.Fatal(err)
		}
		if !sameSnapshot(before, snapshot(t, client, prefix)) {
			t.Error("Peek changed stored state")
		}
	})
	t.Run("RejectedByOneLayer", func(t *testing.T) {
		strict := append([]enforce.Limit{{Name: "strict", Algorithm: enforce.FixedWindow, Limit: 1, Window: time.Minute, Cost: 2}}, limits...)
		d, err := store.Allow(ctx, enforce.Request{Subject: req.Subject, Limits: strict})
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			t.Fatal("cost 2 against limit 1 was admitted")
		}
		if !sameSnapshot(before, snapshot(t, client, prefix)) {
			t.Error("a rejected request changed stored state")
		}
	})
}

func TestRedisStoreSurvivesScriptFlushAndRestart(t *testing.T) {
	srv := startPrivateRedis(t)
	client := srv.client()
	store := newTestRedisStore(t, client, Options{Prefix: "t:", Timeout: 500 * time.Millisecond})
	ctx := context.Background()
	req := enforce.Request{Subject: "key:1", Limits: []enforce.Limit{{Name: "fw", Algorithm: enforce.FixedWindow, Limit: 100, Window: time.Hour}}}
	allow := func() (enforce.Decision, error) { return store.Allow(ctx, req) }

	if _, err := allow(); err != nil {
		t.Fatalf("first Allow: %v", err)
	}
	t.Run("ReloadsAfterScriptFlush", func(t *testing.T) {
		if err := client.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		d, err := allow()
		if err != nil {
			t.Fatalf("Allow after SCRIPT FLUSH: %v", err)
		}
		if d.Layers[0].Remaining != 98 {
			t.Errorf("Remaining = %d, want 98", d.Layers[0].Remaining)
		}
	})
	t.Run("UnavailableWhileDown", func(t *testing.T) {
		srv.stop()
		_, err := allow()
		if !errors.Is(err, enforce.ErrStoreUnavailable) {
			t.Fatalf("Allow with Redis down = %v, want ErrStoreUnavailable", err)
		}
	})
	t.Run("RecoversAfterRestart", func(t *testing.T) {
		if err := srv.start(); err != nil {
			t.Fatal(err)
		}
		var d enforce.Decision
		var err error
		// The pool may hold connections to the dead server; a few attempts
		// flush them out.
		for i := 0; i < 20; i++ {
			if d, err = allow(); err == nil {
				break
			}
		}
		if err != nil {
			t.Fatalf("Allow after restart: %v", err)
		}
		// The restarted server lost its state (no persistence) and its scripts.
		if d.Layers[0].Remaining != 99 {
			t.Errorf("Remaining = %d, want 99 on a fresh server", d.Layers[0].Remaining)
		}
	})
}

func TestRedisStoreUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1})
	defer client.Close()
	store, err := New(client, Options{Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatalf("NewRedisStore with Redis down = %v, want a store that reports per call", err)
	}
	defer store.Close()
	req := enforce.Request{Subject: "key:1", Limits: []enforce.Limit{{Name: "fw", Algorithm: enforce.FixedWindow, Limit: 1, Window: time.Second}}}
	for _, op := range []struct {
		name string
		call func(context.Context, enforce.Request) (enforce.Decision, error)
	}{{"Allow", store.Allow}, {"Peek", store.Peek}} {
		t.Run(op.name, func(t *testing.T) {
			if _, err := op.call(context.Background(), req); !errors.Is(err, enforce.ErrStoreUnavailable) {
				t.Errorf("%s = %v, want ErrStoreUnavailable", op.name, err)
			}
		})
	}
}

// evalshaCalls reads how many EVALSHA calls the server has answered.
func evalshaCalls(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:calls="); ok {
			n, _, _ := strings.Cut(rest, ",")
			v, err := strconv.ParseInt(n, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	return 0
}

// TestRedisStoreScriptCalls counts EVALSHA calls on a private redis-server:
// a decision alone is one script call whatever its layer count, and
// decisions queued while Redis is busy share one call, or with a Cluster or
// Ring client (oneRequestPerScript) one pipeline of a call each.
func TestRedisStoreScriptCalls(t *testing.T) {
	srv := startPrivateRedis(t)
	admin := srv.client()
	ctx := context.Background()
	for _, layers := range []int{1, 3, 5} {
		limits := everyAlgorithm()[:layers]
		t.Run(fmt.Sprintf("%dLayers/OneAtATime", layers), func(t *testing.T) {
			store := newTestRedisStore(t, srv.client(), Options{Prefix: "one:", Timeout: 2 * time.Second})
			before := evalshaCalls(t, admin)
			const decisions = 20
			for i := range decisions {
				if _, err := store.Allow(ctx, enforce.Request{Subject: fmt.Sprintf("key:%d:%d", layers, i), Route: "GET /x", Limits: limits}); err != nil {
					t.Fatal(err)
				}
			}
			if got := evalshaCalls(t, admin) - before; got != decisions {
				t.Errorf("EVALSHA calls = %d for %d decisions of %d layers one at a time, want one each", got, decisions, layers)
			}
		})
		for _, perRequest := range []bool{false, true} {
			name, want := "Queued/Batched", func(queued int) int64 { return 2 } // the first call, then the queued batch
			if perRequest {
				name, want = "Queued/OneRequestPerScript", func(queued int) int64 { return int64(1 + queued) }
			}
			t.Run(fmt.Sprintf("%dLayers/%s", layers, name), func(t *testing.T) {
				store := newTestRedisStore(t, srv.client(), Options{Prefix: fmt.Sprintf("q%v:", perRequest), Timeout: 10 * time.Second,
					Pipelines: 1, oneRequestPerScript: perRequest})
				const queued = 100
				before := evalshaCalls(t, admin)
				// Freeze Redis while the only pipeline worker waits on a first
				// decision, so the next ones queue behind it.
				srv.signal(syscall.SIGSTOP)
				t.Cleanup(func() { srv.signal(syscall.SIGCONT) })
				var wg sync.WaitGroup
				errs := make(chan error, queued+1)
				decide := func(i int) {
					defer wg.Done()
					// Distinct subjects: identical Allow calls of one subject
					// would be coalesced into one request.
					d, err := store.Allow(ctx, enforce.Request{Subject: fmt.Sprintf("key:%d:%d", layers, i), Route: "GET /x", Limits: limits})
					if err == nil && !d.Allowed {
						err = fmt.Errorf("decision %d rejected", i)
					}
					errs <- err
				}
				wg.Add(1)
				go decide(0)
				// The worker has cut its batch (and numbered it) before it
				// sends it: from then on, new decisions queue.
				waitFor(t, func() bool { return store.batches.Load() == 1 })
				for i := 1; i <= queued; i++ {
					wg.Add(1)
					go decide(i)
				}
				waitFor(t, func() bool { return len(store.queue) == queued })
				srv.signal(syscall.SIGCONT)
				wg.Wait()
				close(errs)
				for err := range errs {
					if err != nil {
						t.Fatal(err)
					}
				}
				if got := evalshaCalls(t, admin) - before; got != want(queued) {
					t.Errorf("EVALSHA calls = %d for 1 + %d queued decisions of %d layers, want %d", got, queued, layers, want(queued))
				}
			})
		}
	}
}

// waitFor polls cond for up to five seconds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 5s")
		}
		time.Sleep(time.Millisecond)
	}
}
