package enforce

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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
func everyAlgorithm() []Limit {
	return []Limit{
		{Name: "fw", Algorithm: FixedWindow, Limit: 10, Window: time.Minute},
		{Name: "log", Algorithm: SlidingWindowLog, Limit: 10, Window: time.Minute},
		{Name: "swc", Algorithm: SlidingWindowCounter, Limit: 10, Window: time.Minute},
		{Name: "tb", Algorithm: TokenBucket, Limit: 10, Window: time.Minute},
		{Name: "lb", Algorithm: LeakyBucket, Limit: 10, Window: time.Minute, Burst: 5, Mode: ModeQueue},
	}
}

func TestRedisStoreKeys(t *testing.T) {
	client, prefix := newTestRedis(t)
	store := newTestRedisStore(t, client, RedisOptions{Prefix: prefix, Timeout: 2 * time.Second})
	ctx := context.Background()
	subject := "key:42"
	d, err := store.Allow(ctx, Request{Subject: subject, Route: "GET /api/items/{id}", Limits: everyAlgorithm()})
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
	client, prefix := newTestRedis(t)
	store := newTestRedisStore(t, client, RedisOptions{Prefix: prefix, Timeout: 2 * time.Second, DisableUsage: true})
	ctx := context.Background()
	limits := everyAlgorithm()
	req := Request{Subject: "ip:192.0.2.1", Limits: limits}

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
		strict := append([]Limit{{Name: "strict", Algorithm: FixedWindow, Limit: 1, Window: time.Minute, Cost: 2}}, limits...)
		d, err := store.Allow(ctx, Request{Subject: req.Subject, Limits: strict})
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
	store := newTestRedisStore(t, client, RedisOptions{Prefix: "t:", Timeout: 500 * time.Millisecond})
	ctx := context.Background()
	req := Request{Subject: "key:1", Limits: []Limit{{Name: "fw", Algorithm: FixedWindow, Limit: 100, Window: time.Hour}}}
	allow := func() (Decision, error) { return store.Allow(ctx, req) }

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
		if !errors.Is(err, ErrStoreUnavailable) {
			t.Fatalf("Allow with Redis down = %v, want ErrStoreUnavailable", err)
		}
	})
	t.Run("RecoversAfterRestart", func(t *testing.T) {
		if err := srv.start(); err != nil {
			t.Fatal(err)
		}
		var d Decision
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
	store, err := NewRedisStore(client, RedisOptions{Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatalf("NewRedisStore with Redis down = %v, want a store that reports per call", err)
	}
	defer store.Close()
	req := Request{Subject: "key:1", Limits: []Limit{{Name: "fw", Algorithm: FixedWindow, Limit: 1, Window: time.Second}}}
	for _, op := range []struct {
		name string
		call func(context.Context, Request) (Decision, error)
	}{{"Allow", store.Allow}, {"Peek", store.Peek}} {
		t.Run(op.name, func(t *testing.T) {
			if _, err := op.call(context.Background(), req); !errors.Is(err, ErrStoreUnavailable) {
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
			store := newTestRedisStore(t, srv.client(), RedisOptions{Prefix: "one:", Timeout: 2 * time.Second})
			before := evalshaCalls(t, admin)
			const decisions = 20
			for i := range decisions {
				if _, err := store.Allow(ctx, Request{Subject: fmt.Sprintf("key:%d:%d", layers, i), Route: "GET /x", Limits: limits}); err != nil {
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
				store := newTestRedisStore(t, srv.client(), RedisOptions{Prefix: fmt.Sprintf("q%v:", perRequest), Timeout: 10 * time.Second,
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
					d, err := store.Allow(ctx, Request{Subject: fmt.Sprintf("key:%d:%d", layers, i), Route: "GET /x", Limits: limits})
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

func TestCoalesceGroupsIdenticalAllowCalls(t *testing.T) {
	// The store hands out one *limitArgs per distinct limit.
	limits := map[string]*limitArgs{}
	call := func(mode, subject, field string) *redisCall {
		if limits[field] == nil {
			limits[field] = &limitArgs{kind: kindFixedWindow, field: field, args: [8]any{field, codeFixedWindow, int64(10), int64(60e6), int64(0), int64(1), "fw:60000000:10:0", int64(0)}}
		}
		return &redisCall{keys: []string{"t:{" + subject + "}"}, mode: mode, limits: []*limitArgs{limits[field]}}
	}
	a1, a2, a3 := call("a", "key:1", "fw:fw:60000000:10"), call("a", "key:1", "fw:fw:60000000:10"), call("a", "key:1", "fw:fw:60000000:10")
	other := call("a", "key:2", "fw:fw:60000000:10")
	otherLimit := call("a", "key:1", "fw2:fw:60000000:10")
	otherClock := call("a", "key:1", "fw:fw:60000000:10")
	otherClock.now = "1000"
	p1, p2 := call("p", "key:1", "fw:fw:60000000:10"), call("p", "key:1", "fw:fw:60000000:10")
	w := newBatcher(8)
	leaders := w.coalesce([]*redisCall{a1, p1, a2, other, otherLimit, p2, a3, otherClock})
	cases := []struct {
		name      string
		call      *redisCall
		wantCount int
		wantGroup []*redisCall // the calls deciding in call's request
	}{
		{"IdenticalAllowCallsShareOne", a1, 3, []*redisCall{a1, a3, a2}},
		{"PeekIsNeverCoalesced", p1, 1, []*redisCall{p1}},
		{"OtherSubjectRunsAlone", other, 1, []*redisCall{other}},
		{"OtherLimitsRunAlone", otherLimit, 1, []*redisCall{otherLimit}},
		{"SecondPeekNeither", p2, 1, []*redisCall{p2}},
		{"OtherClockRunsAlone", otherClock, 1, []*redisCall{otherClock}},
	}
	// Requests go out in the order of their first call.
	if len(leaders) != len(cases) {
		t.Fatalf("coalesce made %d requests of 8, want %d", len(leaders), len(cases))
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if leaders[i] != tc.call {
				t.Fatalf("request %d is not the expected leader", i)
			}
			if tc.call.count != tc.wantCount {
				t.Errorf("count = %d, want %d", tc.call.count, tc.wantCount)
			}
			var group []*redisCall
			for c := tc.call; c != nil; c = c.next {
				group = append(group, c)
			}
			if len(group) != len(tc.wantGroup) {
				t.Fatalf("group of %d calls, want %d", len(group), len(tc.wantGroup))
			}
			for j := range group {
				if group[j] != tc.wantGroup[j] {
					t.Errorf("group member %d differs", j)
				}
			}
		})
	}
	t.Run("ScriptCallsSplitWhereTheClockChanges", func(t *testing.T) {
		want := []script{{0, 5}, {5, 6}}
		if got := w.group(leaders, false); !slices.Equal(got, want) {
			t.Errorf("group = %v, want %v", got, want)
		}
		want = []script{{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}, {5, 6}}
		if got := w.group(leaders, true); !slices.Equal(got, want) {
			t.Errorf("group, one request per script = %v, want %v", got, want)
		}
	})
}

// runTogether decides reqs as the pipeline worker does a batch that holds
// them all, and returns each one's reply or error.
func runTogether(t *testing.T, store *RedisStore, reqs []Request, consume []bool) ([][]int64, []error) {
	t.Helper()
	calls := make([]*redisCall, len(reqs))
	for i, req := range reqs {
		c, err := store.prepare(req, consume[i], store.clock())
		if err != nil {
			t.Fatal(err)
		}
		calls[i] = c
	}
	var pc *pipeConn // as the store's workers send: over their own connection when it has them
	if store.direct != nil {
		pc = newPipeConn(store.direct, store.timeout)
		defer pc.close()
	}
	store.run(calls, newBatcher(len(calls)), pc)
	replies, errs := make([][]int64, len(calls)), make([]error, len(calls))
	for i, c := range calls {
		<-c.done
		replies[i], errs[i] = slices.Clone(c.reply), c.err
	}
	return replies, errs
}

// TestCoalescedScriptCallDecidesAsCallsInARow runs k Allow requests as one
// coalesced request on one subject and as k requests on another, on the
// same clock, for every algorithm and with rejections among them: the
// replies must be identical.
func TestCoalescedScriptCallDecidesAsCallsInARow(t *testing.T) {
	const k = 14
	for _, limits := range [][]Limit{
		{{Name: "fw", Algorithm: FixedWindow, Limit: 10, Window: time.Minute}},
		{{Name: "log", Algorithm: SlidingWindowLog, Limit: 10, Window: time.Minute}},
		{{Name: "tb", Algorithm: TokenBucket, Limit: 10, Window: time.Minute, Cost: 2}},
		{{Name: "lb", Algorithm: LeakyBucket, Limit: 10, Window: time.Minute, Burst: 5, Mode: ModeQueue}},
		everyAlgorithm(),
		{everyAlgorithm()[2], {Name: "small", Algorithm: FixedWindow, Limit: 3, Window: time.Minute}},
	} {
		t.Run(fmt.Sprintf("%s/%dLayers", limits[0].Algorithm, len(limits)), func(t *testing.T) {
			client, prefix := newTestRedis(t)
			clock := newFakeClock()
			store := newTestRedisStore(t, client, RedisOptions{Prefix: prefix, Now: clock.Now, Timeout: 2 * time.Second, DisableUsage: true})
			reqs, consume := make([]Request, k), make([]bool, k)
			for j := range k {
				reqs[j], consume[j] = Request{Subject: "key:coalesced", Limits: limits}, true
			}
			together, errs := runTogether(t, store, reqs, consume)
			var got, want []int64
			for j := range k {
				if errs[j] != nil {
					t.Fatal(errs[j])
				}
				// the coalesced callers are signalled in chain order, not
				// arrival order, so compare the sequence of decisions
				got = append(got, together[j]...)
				one, errs := runTogether(t, store, []Request{{Subject: "key:one-by-one", Limits: limits}}, []bool{true})
				if errs[0] != nil {
					t.Fatal(errs[0])
				}
				want = append(want, one[0]...)
			}
			sortReplies(got, len(got)/k)
			sortReplies(want, len(want)/k)
			if !slices.Equal(got, want) {
				t.Errorf("coalesced replies %v,\none by one %v", got, want)
			}
		})
	}
}

// sortReplies sorts a run of replies of per values each, so two runs that
// handed the same decisions to callers in another order compare equal.
func sortReplies(values []int64, per int) {
	rows := make([][]int64, 0, len(values)/per)
	for i := 0; i < len(values); i += per {
		rows = append(rows, slices.Clone(values[i:i+per]))
	}
	slices.SortFunc(rows, slices.Compare)
	values = values[:0]
	for _, r := range rows {
		values = append(values, r...)
	}
}

// TestBatchedScriptCallDecidesAsSeparateCalls is a differential test of
// batching: random rounds of requests (Allow and Peek, every algorithm, one
// to three layers, several routes of a subject, identical concurrent calls)
// are decided in one script call by one store and one request at a time by
// another, on the same controlled clock; every reply must match.
func TestBatchedScriptCallDecidesAsSeparateCalls(t *testing.T) {
	client, prefix := newTestRedis(t)
	clock := newFakeClock()
	batched := newTestRedisStore(t, client, RedisOptions{Prefix: prefix + "b:", Now: clock.Now, Timeout: 2 * time.Second, DisableUsage: true})
	serial := newTestRedisStore(t, client, RedisOptions{Prefix: prefix + "s:", Now: clock.Now, Timeout: 2 * time.Second, DisableUsage: true})
	small := []Limit{
		{Name: "fw", Algorithm: FixedWindow, Limit: 4, Window: 10 * time.Second},
		{Name: "log", Algorithm: SlidingWindowLog, Limit: 5, Window: 10 * time.Second, Cost: 2},
		{Name: "swc", Algorithm: SlidingWindowCounter, Limit: 6, Window: 10 * time.Second},
		{Name: "tb", Algorithm: TokenBucket, Limit: 3, Window: 5 * time.Second, Burst: 4},
		{Name: "lb", Algorithm: LeakyBucket, Limit: 3, Window: 5 * time.Second, Burst: 2, Mode: ModeQueue},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	// Each subject has two routes whose limit sets differ; the second shares
	// the first's leading limit, as an endpoint tier shares the plan's limit.
	routes := map[string][2][]Limit{}
	subjects := []string{"key:a", "key:b", "key:c", "key:d"}
	for _, s := range subjects {
		first := rng.IntN(len(small))
		a := []Limit{small[first]}
		b := []Limit{small[first], small[(first+1+rng.IntN(len(small)-1))%len(small)]}
		if rng.IntN(2) == 0 {
			a = append(a, small[(first+2)%len(small)])
		}
		routes[s] = [2][]Limit{a, b}
	}
	decisions := 0
	for round := range 60 {
		clock.Set(clock.Now().Add(time.Duration(rng.IntN(1500)) * time.Millisecond))
		// At most one route per subject in a round: requests of one subject
		// on different routes may be reordered by coalescing, as concurrent
		// requests may be, which would make the serial replay's order
		// ambiguous.
		var reqs []Request
		var consume []bool
		for _, s := range subjects {
			route := rng.IntN(2)
			for range rng.IntN(4) {
				reqs = append(reqs, Request{Subject: s, Route: fmt.Sprint("GET /", route), Limits: routes[s][route]})
				consume = append(consume, rng.IntN(5) > 0)
			}
		}
		rng.Shuffle(len(reqs), func(i, j int) {
			reqs[i], reqs[j] = reqs[j], reqs[i]
			consume[i], consume[j] = consume[j], consume[i]
		})
		if len(reqs) == 0 {
			continue
		}
		got, gotErrs := runTogether(t, batched, reqs, consume)
		// The serial replay decides each subject's requests in the order the
		// batch did: peeks where they stood, a coalesced group's Allow calls
		// together at its first call.
		order := batchOrder(reqs, consume)
		want, wantErrs := make([][]int64, len(reqs)), make([]error, len(reqs))
		for _, i := range order {
			r, e := runTogether(t, serial, reqs[i:i+1], consume[i:i+1])
			want[i], wantErrs[i] = r[0], e[0]
		}
		for i := range reqs {
			decisions++
			if gotErrs[i] != nil || wantErrs[i] != nil {
				t.Fatalf("round %d, request %d: batched error %v, serial error %v", round, i, gotErrs[i], wantErrs[i])
			}
		}
		// Coalesced callers of one group may receive the group's decisions
		// in another order than the serial replay's, so compare each
		// subject's decisions as a sorted whole.
		for _, s := range subjects {
			var g, w []int64
			per := 0
			for i := range reqs {
				if reqs[i].Subject == s && consume[i] {
					g, w = append(g, got[i]...), append(w, want[i]...)
					per = len(got[i])
				} else if reqs[i].Subject == s && !slices.Equal(got[i], want[i]) {
					t.Errorf("round %d: peek of %s: batched %v, serial %v", round, s, got[i], want[i])
				}
			}
			if per > 0 {
				sortReplies(g, per)
				sortReplies(w, per)
			}
			if !slices.Equal(g, w) {
				t.Errorf("round %d: %s: batched %v,\nserial %v", round, s, g, w)
			}
		}
	}
	t.Logf("%d decisions compared", decisions)
}

// TestBatchedScriptCallIsolatesAFailingRequest: a request whose Redis
// command fails (its subject's key holds a string) gets that error, alone
// or in a batch, and the others in its batch are decided all the same. On a
// private redis-server: miniredis fails the whole script instead.
func TestBatchedScriptCallIsolatesAFailingRequest(t *testing.T) {
	srv := startPrivateRedis(t)
	client := srv.client()
	store := newTestRedisStore(t, client, RedisOptions{Prefix: "t:", Timeout: 2 * time.Second, DisableUsage: true})
	ctx := context.Background()
	if err := client.Set(ctx, "t:{key:wrongtype}", "x", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	limits := everyAlgorithm()
	bad := Request{Subject: "key:wrongtype", Limits: limits}
	good := func(i int) Request { return Request{Subject: fmt.Sprint("key:", i), Limits: limits} }
	for _, tc := range []struct {
		name string
		reqs []Request
	}{
		{"Alone", []Request{bad}},
		{"First", []Request{bad, good(1), good(2)}},
		{"Between", []Request{good(3), bad, good(4)}},
		{"Last", []Request{good(5), good(6), bad}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			consume := make([]bool, len(tc.reqs))
			for i := range consume {
				consume[i] = true
			}
			replies, errs := runTogether(t, store, tc.reqs, consume)
			for i, req := range tc.reqs {
				if req.Subject == bad.Subject {
					if errs[i] == nil || !strings.Contains(errs[i].Error(), "WRONGTYPE") || errors.Is(errs[i], ErrStoreUnavailable) {
						t.Errorf("request on a key of the wrong type: error %v, want the WRONGTYPE script error", errs[i])
					}
					continue
				}
				if errs[i] != nil {
					t.Fatalf("%s: %v", req.Subject, errs[i])
				}
				if len(replies[i]) != 3+4*len(limits) || replies[i][0] != 1 {
					t.Errorf("%s: reply %v, want an admission of %d limits", req.Subject, replies[i], len(limits))
				}
				d, err := store.Peek(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				if got := d.Layers[0].Remaining; got != limits[0].Limit-1 {
					t.Errorf("%s: remaining %d after one admission, want %d", req.Subject, got, limits[0].Limit-1)
				}
			}
		})
	}
}

// batchOrder is the order in which one script call decides reqs: requests in
// the order of their first call, a coalesced group (identical Allow calls)
// wholly at its first call.
func batchOrder(reqs []Request, consume []bool) []int {
	var order []int
	done := make([]bool, len(reqs))
	for i := range reqs {
		if done[i] {
			continue
		}
		order, done[i] = append(order, i), true
		if !consume[i] {
			continue
		}
		for j := i + 1; j < len(reqs); j++ {
			if !done[j] && consume[j] && reqs[j].Subject == reqs[i].Subject && slices.Equal(reqs[j].Limits, reqs[i].Limits) {
				order, done[j] = append(order, j), true
			}
		}
	}
	return order
}

func TestRedisStoreNegativeCache(t *testing.T) {
	strict := Limit{Name: "strict", Algorithm: FixedWindow, Limit: 1, Window: 10 * time.Second}
	queued := Limit{Name: "queued", Algorithm: LeakyBucket, Limit: 1, Window: 10 * time.Second, Mode: ModeQueue}
	raised := strict
	raised.Limit = 5
	cases := []struct {
		name       string
		limits     []Limit
		route      string // of the request made while Redis is down
		later      []Limit
		at         time.Duration // when that request is made
		wantCached bool
	}{
		{name: "RepeatsRejectionWithoutRedis", limits: []Limit{strict}, route: "GET /a", later: []Limit{strict}, at: 4 * time.Second, wantCached: true},
		{name: "ExpiresWithRetryAfter", limits: []Limit{strict}, route: "GET /a", later: []Limit{strict}, at: 10 * time.Second},
		{name: "OtherRouteMisses", limits: []Limit{strict}, route: "GET /b", later: []Limit{strict}, at: time.Second},
		{name: "ChangedLimitMisses", limits: []Limit{strict}, route: "GET /a", later: []Limit{raised}, at: time.Second},
		{name: "QueueModeIsNeverCached", limits: []Limit{queued}, route: "GET /a", later: []Limit{queued}, at: time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := startPrivateRedis(t)
			clock := newFakeClock()
			store := newTestRedisStore(t, srv.client(), RedisOptions{Prefix: "t:", Now: clock.Now, Timeout: 200 * time.Millisecond, NegativeCacheSize: 10})
			ctx := context.Background()
			req := Request{Subject: "key:1", Route: "GET /a", Limits: tc.limits}
			if d, err := store.Allow(ctx, req); err != nil || !d.Allowed {
				t.Fatalf("first request: %+v, %v; want admitted", d, err)
			}
			rejected, err := store.Allow(ctx, req)
			if err != nil || rejected.Allowed {
				t.Fatalf("second request: %+v, %v; want rejected", rejected, err)
			}
			srv.stop()
			clock.Set(epoch.Add(tc.at))
			d, err := store.Allow(ctx, Request{Subject: "key:1", Route: tc.route, Limits: tc.later})
			if !tc.wantCached {
				if !errors.Is(err, ErrStoreUnavailable) {
					t.Fatalf("Allow = %+v, %v; want a Redis call failing with ErrStoreUnavailable", d, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Allow = %v; want the cached rejection", err)
			}
			want := rejected.Layers[0]
			want.RetryAfter -= tc.at
			want.ResetAfter -= tc.at
			if d.Allowed || len(d.Layers) != 1 || d.Layers[0] != want {
				t.Errorf("cached decision = %+v, want rejected with %+v", d, want)
			}
		})
	}
}

func TestNewRedisStoreRefusesABracedPrefix(t *testing.T) {
	client, _ := newTestRedis(t)
	if s, err := NewRedisStore(client, RedisOptions{Prefix: "app:{x}:"}); err == nil {
		s.Close()
		t.Fatal("NewRedisStore accepted a prefix with a hash tag of its own")
	}
}

func TestRedisStoreWritesUsageForOtherInstances(t *testing.T) {
	limits := []Limit{{Name: "fw", Algorithm: FixedWindow, Limit: 1, Window: time.Hour}}
	ctx := context.Background()
	// admitOneRejectOne makes one admitted and one rejected decision.
	admitOneRejectOne := func(t *testing.T, s *RedisStore, subject string) {
		t.Helper()
		for range 2 {
			if _, err := s.Allow(ctx, Request{Subject: subject, Route: "GET /a", Limits: limits}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// readUsage reads subject's usage through another instance.
	readUsage := func(t *testing.T, reader *RedisStore, subject string) (admitted, rejected int64) {
		t.Helper()
		points, err := reader.Usage(ctx, []string{subject}, time.Now().Add(-time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range points {
			admitted += p.Admitted
			rejected += p.Rejected
		}
		return admitted, rejected
	}
	cases := []struct {
		name  string
		flush time.Duration
		close bool // close the writer instead of waiting for its flush
	}{
		{name: "EveryFlushInterval", flush: 20 * time.Millisecond},
		{name: "OnClose", flush: time.Hour, close: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			client, prefix := newTestRedis(t)
			writer := newTestRedisStore(t, client, RedisOptions{Prefix: prefix, Timeout: 2 * time.Second, UsageFlush: tc.flush})
			reader := newTestRedisStore(t, newInstanceClient(t), RedisOptions{Prefix: prefix, Timeout: 2 * time.Second})
			admitOneRejectOne(t, writer, "key:1")
			if tc.close {
				writer.Close()
			}
			var admitted, rejected int64
			for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				if admitted, rejected = readUsage(t, reader, "key:1"); admitted+rejected == 2 {
					break
				}
			}
			if admitted != 1 || rejected != 1 {
				t.Errorf("another instance reads admitted %d, rejected %d; want 1 and 1", admitted, rejected)
			}
		})
	}
	t.Run("KeptWhileRedisIsDown", func(t *testing.T) {
		srv := startPrivateRedis(t)
		store := newTestRedisStore(t, srv.client(), RedisOptions{Prefix: "t:", Timeout: 500 * time.Millisecond, UsageFlush: time.Hour})
		admitOneRejectOne(t, store, "key:1")
		srv.stop()
		if err := store.flushUsage(ctx); !errors.Is(err, ErrStoreUnavailable) {
			t.Fatalf("flush with Redis down = %v, want ErrStoreUnavailable", err)
		}
		if err := srv.start(); err != nil {
			t.Fatal(err)
		}
		var err error
		for range 20 { // the pool may hold connections to the dead server
			if err = store.flushUsage(ctx); err == nil {
				break
			}
		}
		if err != nil {
			t.Fatalf("flush after restart: %v", err)
		}
		reader := newTestRedisStore(t, srv.client(), RedisOptions{Prefix: "t:", Timeout: 500 * time.Millisecond})
		if admitted, rejected := readUsage(t, reader, "key:1"); admitted != 1 || rejected != 1 {
			t.Errorf("after the restart: admitted %d, rejected %d; want the 1 and 1 counted while down", admitted, rejected)
		}
	})
}

// TestAllowIntoReusesTheCallersLayers: the Redis store, alone and behind a
// FailoverStore, decides into the slice it is given when it is large
// enough, with the same decision Allow makes, and allocates a fresh one when
// it is not.
func TestAllowIntoReusesTheCallersLayers(t *testing.T) {
	client, prefix := newTestRedis(t)
	clock := newFakeClock()
	rs := newTestRedisStore(t, client, RedisOptions{Prefix: prefix, Now: clock.Now, Timeout: 2 * time.Second})
	limits := everyAlgorithm()
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		store layersAllower
	}{
		{"RedisStore", rs},
		{"FailoverStore", NewFailoverStore(rs, FailoverOptions{Timeout: 2 * time.Second})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			buf := make([]LayerResult, 0, len(limits))
			for i := range 3 {
				into, err := tc.store.AllowInto(ctx, Request{Subject: tc.name + ":into", Limits: limits}, buf)
				if err != nil {
					t.Fatal(err)
				}
				if &into.Layers[0] != &buf[:1][0] {
					t.Fatalf("decision %d: layers not written into the given slice", i)
				}
				plain, err := rs.Allow(ctx, Request{Subject: tc.name + ":plain", Limits: limits})
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(into.Layers, plain.Layers) || into.Allowed != plain.Allowed {
					t.Fatalf("decision %d: AllowInto %+v, Allow %+v", i, into, plain)
				}
			}
			small, err := tc.store.AllowInto(ctx, Request{Subject: tc.name + ":small", Limits: limits}, make([]LayerResult, 0, 1))
			if err != nil {
				t.Fatal(err)
			}
			if len(small.Layers) != len(limits) {
				t.Errorf("with too small a slice: %d layers, want %d", len(small.Layers), len(limits))
			}
		})
	}
}
