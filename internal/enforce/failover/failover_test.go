package failover_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/failover"
	"github.com/sluicehq/sluice/internal/enforce/httplimit"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/enforce/redisstore"
	"github.com/sluicehq/sluice/internal/enforce/storetest"
)

// privateRedis is a redis-server of the test's own, on a free port below
// 32768, that the test may stop, freeze and restart. The shared Redis is
// never touched.
type privateRedis struct {
	t    *testing.T
	port int
	cmd  *exec.Cmd
}

func startPrivateRedis(t *testing.T) *privateRedis {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server is needed to test Redis failure modes: %v", err)
	}
	p := &privateRedis{t: t}
	for range 20 {
		port := 20000 + rand.IntN(12000)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue
		}
		l.Close()
		p.port = port
		break
	}
	if p.port == 0 {
		t.Fatal("no free port below 32768")
	}
	p.start()
	t.Cleanup(p.stop)
	return p
}

func (p *privateRedis) addr() string { return "127.0.0.1:" + strconv.Itoa(p.port) }

func (p *privateRedis) start() {
	p.t.Helper()
	p.cmd = exec.Command("redis-server", "--port", strconv.Itoa(p.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no")
	if err := p.cmd.Start(); err != nil {
		p.t.Fatalf("start redis-server: %v", err)
	}
	c := redis.NewClient(&redis.Options{Addr: p.addr(), MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("private redis on %s did not answer: %v", p.addr(), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop kills the server and waits for it to exit.
func (p *privateRedis) stop() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGCONT) // a frozen server must be able to die
	p.cmd.Process.Kill()
	p.cmd.Wait()
	p.cmd = nil
}

func (p *privateRedis) freeze() { p.cmd.Process.Signal(syscall.SIGSTOP) }
func (p *privateRedis) thaw()   { p.cmd.Process.Signal(syscall.SIGCONT) }

// failoverEnv is one middleware over a FailoverStore over a RedisStore on a
// private Redis.
type failoverEnv struct {
	redis    *privateRedis
	failover *failover.Store
	reg      *prometheus.Registry
	handler  http.Handler
	// clock is the breaker's: its window and cool-down move only when the
	// test advances it, so no wait depends on how fast the machine runs.
	clock *storetest.Clock
}

const failoverCooldown = 200 * time.Millisecond

// newFailoverEnv puts a FailoverStore with a 500 ms timeout in front of a
// RedisStore on a private redis-server; storeTimeout is the RedisStore's own
// (0: its default, 1 s, so the FailoverStore's deadline binds; 500 ms, as
// the portal configures both, and the store's own bound is relied on). The
// timeouts are far above a healthy decision's on a loaded machine, so only
// the stopped or frozen Redis fails calls.
func newFailoverEnv(t *testing.T, mode enforce.FailureMode, storeTimeout time.Duration) *failoverEnv {
	t.Helper()
	e := &failoverEnv{redis: startPrivateRedis(t), reg: prometheus.NewRegistry(), clock: storetest.NewClockAt(time.Unix(1_800_000_000, 0))}
	client := redis.NewClient(&redis.Options{
		Addr: e.redis.addr(), MaxRetries: -1,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
	})
	t.Cleanup(func() { client.Close() })
	primary, err := redisstore.New(client, redisstore.Options{Prefix: "failover-test:", Timeout: storeTimeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { primary.Close() })
	opts := failover.Options{
		// Two failures in a window of two decisions open the breaker, so
		// that the test sees every transition within a few requests; the
		// volume rules have tests of their own.
		Timeout: 500 * time.Millisecond, MinRequests: 2, MinFailures: 2, Cooldown: failoverCooldown, Probes: 2,
		Instances: 2, Registerer: e.reg, Now: e.clock.Now,
	}
	if mode == enforce.FailLocal {
		// The test's clock, which stands still: on the real one a minute
		// boundary between the local store's requests reset its window.
		opts.Local = memstore.New(memstore.Options{Now: e.clock.Now})
	}
	e.failover = failover.New(primary, opts)
	res := &storetest.Resolver{AnonLimits: []enforce.Limit{
		// 5 per minute shared; 3 per instance when two instances decide alone.
		{Name: "t-global", Algorithm: enforce.FixedWindow, Limit: 5, Window: time.Minute},
	}}
	mw := httplimit.NewMiddleware(e.failover, res, httplimit.Options{FailureMode: mode, Registerer: e.reg})
	mux := http.NewServeMux()
	mux.Handle("GET /api/items/{id}", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("served"))
	})))
	e.handler = mux
	return e
}

type failoverReply struct {
	code      int
	policy    string
	degraded  string
	errorCode string
}

func (e *failoverEnv) get(t *testing.T) failoverReply {
	t.Helper()
	r := httptest.NewRequest("GET", "/api/items/1", nil)
	r.RemoteAddr = "198.51.100.20:4000"
	w := httptest.NewRecorder()
	e.handler.ServeHTTP(w, r)
	rep := failoverReply{code: w.Code, policy: w.Header().Get("RateLimit-Policy"),
		degraded: w.Header().Get(httplimit.HeaderStoreDegraded)}
	if w.Header().Get("Content-Type") == "application/json" {
		var body httplimit.ErrorBody
		if err := json.NewDecoder(w.Body).Decode(&body); err != nil {
			t.Fatal(err)
		}
		rep.errorCode = body.Error
	}
	return rep
}

func (e *failoverEnv) failures(t *testing.T) float64 {
	return gatherValue(t, e.reg, "sluice_store_failures_total", nil)
}

// waitRecovered lets the breaker's cool-down pass on its clock and sends
// requests until they are decided by Redis again and the probes have closed
// the breaker. A probe may fail while the client reconnects; each failure
// opens the breaker for another cool-down, passed at once.
func (e *failoverEnv) waitRecovered(t *testing.T) failoverReply {
	t.Helper()
	for range 50 {
		e.clock.Advance(failoverCooldown)
		rep := e.get(t)
		if e.failover.BreakerState() == "closed" && rep.policy == `"t-global";q=5;w=60` {
			return rep
		}
	}
	t.Fatalf("no recovery after 50 probes: breaker %s", e.failover.BreakerState())
	return failoverReply{}
}

func TestFailoverModesWhenRedisStopsAndRestarts(t *testing.T) {
	redisPolicy := `"t-global";q=5;w=60`
	cases := []struct {
		mode enforce.FailureMode
		// down lists the replies expected, in order, once Redis is stopped.
		down []failoverReply
	}{
		{mode: enforce.FailOpen, down: []failoverReply{
			{code: 200, degraded: "store-unavailable"}, {code: 200, degraded: "store-unavailable"},
			{code: 200, degraded: "store-unavailable"}, {code: 200, degraded: "store-unavailable"},
			{code: 200, degraded: "store-unavailable"},
		}},
		{mode: enforce.FailClosed, down: []failoverReply{
			{code: 503, errorCode: "rate_limit_unavailable"}, {code: 503, errorCode: "rate_limit_unavailable"},
			{code: 503, errorCode: "rate_limit_unavailable"}, {code: 503, errorCode: "rate_limit_unavailable"},
			{code: 503, errorCode: "rate_limit_unavailable"},
		}},
		{mode: enforce.FailLocal, down: []failoverReply{
			// The local store enforces ceil(5/2) = 3 per minute.
			// Every header kept, marked local.
			{code: 200, policy: `"t-global";q=3;w=60`, degraded: "local"}, {code: 200, policy: `"t-global";q=3;w=60`, degraded: "local"},
			{code: 200, policy: `"t-global";q=3;w=60`, degraded: "local"},
			{code: 429, policy: `"t-global";q=3;w=60`, degraded: "local", errorCode: "rate_limit_exceeded"},
			{code: 429, policy: `"t-global";q=3;w=60`, degraded: "local", errorCode: "rate_limit_exceeded"},
		}},
	}
	for _, tc := range cases {
		t.Run(string(tc.mode), func(t *testing.T) {
			e := newFailoverEnv(t, tc.mode, 0)
			if rep := e.get(t); rep.code != 200 || rep.policy != redisPolicy || rep.degraded != "" {
				t.Fatalf("with Redis up: %+v", rep)
			}

			e.redis.stop()
			for i, want := range tc.down {
				if got := e.get(t); got != want {
					t.Errorf("Redis down, request %d: %+v, want %+v", i, got, want)
				}
			}
			if state := e.failover.BreakerState(); state != "open" {
				t.Errorf("breaker %s after %d failures, want open", state, len(tc.down))
			}
			// While the breaker is open, Redis is not called at all: its
			// clock has not moved, so the cool-down cannot have passed.
			before := e.failures(t)
			for range 20 {
				e.get(t)
			}
			if after := e.failures(t); after != before || before != 2 {
				t.Errorf("failures %v then %v while open; want 2 and no new calls", before, after)
			}
			if open := gatherValue(t, e.reg, "sluice_store_breaker_open", nil); open != 1 {
				t.Errorf("sluice_store_breaker_open = %v, want 1", open)
			}

			e.redis.start()
			rep := e.waitRecovered(t)
			// Redis restarted empty (no persistence): its counter starts over.
			if rep.code != 200 || rep.degraded != "" {
				t.Errorf("after recovery: %+v", rep)
			}
			if open := gatherValue(t, e.reg, "sluice_store_breaker_open", nil); open != 0 {
				t.Errorf("sluice_store_breaker_open = %v after recovery, want 0", open)
			}
		})
	}
}

func TestFailoverBoundsAHungRedis(t *testing.T) {
	for _, tc := range []struct {
		name         string
		storeTimeout time.Duration
	}{
		{"FailoverDeadline", 0},
		{"StoreDeadlineAsInThePortal", 500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) { testFailoverBoundsAHungRedis(t, tc.storeTimeout) })
	}
}

func testFailoverBoundsAHungRedis(t *testing.T, storeTimeout time.Duration) {
	e := newFailoverEnv(t, enforce.FailLocal, storeTimeout)
	if rep := e.get(t); rep.code != 200 {
		t.Fatalf("with Redis up: %+v", rep)
	}
	e.redis.freeze()
	defer e.redis.thaw()
	// Without the timeout a frozen Redis holds a request until the client's
	// read timeout or forever (and the test until go test's -timeout); with
	// it, each request falls back after 500 ms until the breaker opens, then
	// without calling Redis at all. Figures for the cost are in the README;
	// no duration is asserted. Three requests: two time out (two batches,
	// two failures) and open the breaker, the third is decided locally
	// without calling Redis (the local limit, ceil(5/2) = 3, admits all).
	for i := range 3 {
		rep := e.get(t)
		if rep.code != 200 || rep.policy != `"t-global";q=3;w=60` || rep.degraded != "local" {
			t.Errorf("frozen Redis, request %d: %+v", i, rep)
		}
	}
	if got := e.failures(t); got != 2 {
		t.Errorf("%v failed calls to the frozen Redis, want 2 (the third bypassed it)", got)
	}
	if state := e.failover.BreakerState(); state != "open" {
		t.Errorf("breaker %s, want open", state)
	}
	e.redis.thaw()
	e.waitRecovered(t)
}

func TestParseFailureMode(t *testing.T) {
	cases := []struct {
		in      string
		want    enforce.FailureMode
		wantErr bool
	}{
		{in: "open", want: enforce.FailOpen},
		{in: "closed", want: enforce.FailClosed},
		{in: "local", want: enforce.FailLocal},
		{in: "", wantErr: true},
		{in: "OPEN", wantErr: true},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%q", tc.in), func(t *testing.T) {
			got, err := enforce.ParseFailureMode(tc.in)
			if got != tc.want || (err != nil) != tc.wantErr {
				t.Errorf("ParseFailureMode(%q) = %q, %v", tc.in, got, err)
			}
		})
	}
}

// portalLikeClient is a client of the private Redis configured as the
// portal's (cmd/portal/redis.go): contexts bound each round trip, socket
// timeouts only a backstop.
func portalLikeClient(t *testing.T, p *privateRedis) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: p.addr(), MaxRetries: -1, ContextTimeoutEnabled: true,
		DialTimeout: 2 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second, PoolSize: 64})
	t.Cleanup(func() { c.Close() })
	return c
}

// TestStallsAreWaitedOut freezes a private redis-server for 150 ms at a
// time, ten times, under 64 concurrent callers on one subject, with the
// default timeout and breaker, as the portal runs them: the breaker never
// opens, and no fixed window admits more than the limit (admissions counted
// per window of the decision's own clock, Redis's TIME, or the local
// store's for a decision that fell back).
func TestStallsAreWaitedOut(t *testing.T) {
	for _, near := range []int{0, 10000} {
		t.Run(fmt.Sprintf("NearCache%d", near), func(t *testing.T) {
			p := startPrivateRedis(t)
			primary, err := redisstore.New(portalLikeClient(t, p), redisstore.Options{Prefix: "stall:", NegativeCacheSize: near})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { primary.Close() })
			reg := prometheus.NewRegistry()
			store := failover.New(primary, failover.Options{
				Local: memstore.New(memstore.Options{}), Registerer: reg,
			})
			const limit, window = 100, time.Second
			req := enforce.Request{Subject: "key:hot", Route: "GET /api/search",
				Limits: []enforce.Limit{{Name: "hot", Algorithm: enforce.FixedWindow, Limit: limit, Window: window}}}

			var (
				mu       sync.Mutex
				byWindow = map[int64]int{}
				local    int
				stop     = make(chan struct{})
				wg       sync.WaitGroup
				errs     = make(chan error, 64)
			)
			for range 64 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						d, err := store.Allow(context.Background(), req)
						if err != nil {
							errs <- err
							return
						}
						if d.Allowed {
							mu.Lock()
							byWindow[d.At.UnixNano()/int64(window)]++
							if d.Local {
								local++
							}
							mu.Unlock()
						}
					}
				}()
			}
			for range 10 {
				p.freeze()
				time.Sleep(150 * time.Millisecond) // the stall itself, not a wait for an event
				p.thaw()
				time.Sleep(150 * time.Millisecond)
			}
			close(stop)
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}

			if state := store.BreakerState(); state != "closed" {
				t.Errorf("breaker %s after ten 150 ms stalls", state)
			}
			if opens := gatherValue(t, reg, "sluice_store_breaker_opens_total", map[string]string{"reason": "timeouts"}) +
				gatherValue(t, reg, "sluice_store_breaker_opens_total", map[string]string{"reason": "errors"}); opens != 0 {
				t.Errorf("breaker opened %v times", opens)
			}
			total := 0
			for w, n := range byWindow {
				total += n
				if n > limit {
					t.Errorf("window %d admitted %d, limit %d", w, n, limit)
				}
			}
			t.Logf("%d windows, %d admitted, %d of them locally, %v failed calls", len(byWindow), total, local,
				gatherValue(t, reg, "sluice_store_failures_total", nil))
			if total == 0 {
				t.Error("nothing admitted: the callers never reached Redis")
			}
		})
	}
}

// outageFleet is two instances in local failure mode: each a FailoverStore
// over its own RedisStore on one private redis-server, with its own memory
// store for the outage. Decisions run on one stepped clock (Redis's script
// and the memory stores take it), the breakers on another.
type outageFleet struct {
	redis     *privateRedis
	instances []*failover.Store
	decisions *storetest.Clock
	breakers  *storetest.Clock
}

func newOutageFleet(t *testing.T) *outageFleet {
	t.Helper()
	f := &outageFleet{redis: startPrivateRedis(t), decisions: storetest.NewClockAt(time.Unix(1_800_000_000, 0)), breakers: storetest.NewClockAt(time.Unix(0, 0))}
	for range 2 {
		client := redis.NewClient(&redis.Options{Addr: f.redis.addr(), MaxRetries: -1, ContextTimeoutEnabled: true, DialerRetries: 1})
		t.Cleanup(func() { client.Close() })
		// The default timeout: a shorter one would fail the odd decision of
		// a loaded machine with Redis up, and the test counts those exactly.
		rs, err := redisstore.New(client, redisstore.Options{Prefix: "outage:", Now: f.decisions.Now, DisableUsage: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rs.Close() })
		f.instances = append(f.instances, failover.New(rs, failover.Options{
			Local: memstore.New(memstore.Options{Now: f.decisions.Now}), Instances: 2, Now: f.breakers.Now,
		}))
	}
	return f
}

// hammer sends attempts requests, half through each instance from 8
// goroutines each, and returns how many Redis and the local stores admitted.
func (f *outageFleet) hammer(t *testing.T, attempts int, req enforce.Request) (shared, local int) {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for _, s := range f.instances {
		next := make(chan struct{}, attempts)
		for range attempts / len(f.instances) {
			next <- struct{}{}
		}
		close(next)
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range next {
					d, err := s.Allow(context.Background(), req)
					if err != nil {
						errs <- err
						return
					}
					if d.Allowed {
						mu.Lock()
						if d.Local {
							local++
						} else {
							shared++
						}
						mu.Unlock()
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return shared, local
}

// recover passes the breakers' cool-down and probes (Peek, which consumes
// nothing) until every instance decides with Redis again.
func (f *outageFleet) recover(t *testing.T, req enforce.Request) {
	t.Helper()
	for range 50 {
		f.breakers.Advance(failover.DefaultBreakerCooldown)
		closed := 0
		for _, s := range f.instances {
			d, err := s.Peek(context.Background(), req)
			if err == nil && !d.Local && s.BreakerState() == "closed" {
				closed++
			}
		}
		if closed == len(f.instances) {
			return
		}
	}
	t.Fatal("the instances did not return to Redis after 50 cool-downs")
}

// TestLocalModeBoundsAnOutage checks the bound README states for the local
// failure mode, with limit L = 10 per minute and N = 2 instances, each
// deciding alone with ceil(L/N) = 5: in the window in which Redis fails, and
// in the window in which it returns, a subject is admitted at most
// L + N*ceil(L/N) = 20; when Redis comes back empty (restarted without
// persistence) in the very window it failed in, at most 2L + N*ceil(L/N) =
// 30. The fleet is driven to each bound, so the test shows the bound is the
// most, and that it is reached.
func TestLocalModeBoundsAnOutage(t *testing.T) {
	const L, N = 10, 2
	perInstance := (L + N - 1) / N
	bound := L + N*perInstance
	req := enforce.Request{Subject: "key:outage", Route: "GET /api/search",
		Limits: []enforce.Limit{{Name: "fw", Algorithm: enforce.FixedWindow, Limit: L, Window: time.Minute}}}

	t.Run("RedisStopsThenReturnsInTheNextWindow", func(t *testing.T) {
		f := newOutageFleet(t)
		shared, _ := f.hammer(t, 3*L, req)
		f.redis.stop()
		_, local := f.hammer(t, 6*L, req)
		if got := shared + local; got > bound || shared != L {
			t.Errorf("failing window admitted %d (%d by Redis, %d locally), want at most %d with Redis's exactly %d", got, shared, local, bound, L)
		}

		f.decisions.Advance(time.Minute) // the next window, Redis still down
		_, local = f.hammer(t, 6*L, req)
		f.redis.start()
		f.recover(t, req)
		shared, local2 := f.hammer(t, 3*L, req)
		if got := local + local2 + shared; got > bound {
			t.Errorf("returning window admitted %d (%d locally, then %d by Redis and %d locally), want at most %d", got, local, shared, local2, bound)
		}
		if local != N*perInstance || shared != L || local2 != 0 {
			t.Errorf("returning window: %d locally, then %d by Redis and %d locally; want %d, %d, 0", local, shared, local2, N*perInstance, L)
		}
	})
	t.Run("RedisFreezesAndThawsWithItsCounters", func(t *testing.T) {
		f := newOutageFleet(t)
		shared, _ := f.hammer(t, 3*L, req)
		f.redis.freeze()
		_, local := f.hammer(t, 6*L, req)
		f.redis.thaw()
		f.recover(t, req)
		shared2, local2 := f.hammer(t, 3*L, req)
		if got := shared + local + shared2 + local2; got > bound || shared2 != 0 {
			t.Errorf("window admitted %d (%d by Redis, %d locally, then %d by Redis, %d locally), want at most %d, none by Redis after the thaw",
				got, shared, local, shared2, local2, bound)
		}
	})
	t.Run("RedisRestartsEmptyInTheWindowItFailed", func(t *testing.T) {
		f := newOutageFleet(t)
		shared, _ := f.hammer(t, 3*L, req)
		f.redis.stop()
		_, local := f.hammer(t, 6*L, req)
		f.redis.start()
		f.recover(t, req)
		shared2, _ := f.hammer(t, 3*L, req)
		if got, most := shared+local+shared2, 2*L+N*perInstance; got > most {
			t.Errorf("window admitted %d (%d by Redis, %d locally, %d by the emptied Redis), want at most %d", got, shared, local, shared2, most)
		}
	})
}

// TestAHungRedisOpensTheBreaker is the other side of TestStallsAreWaitedOut:
// with the same defaults and 64 callers, a Redis that stays frozen is an
// outage; the breaker opens (saying the failures were timeouts), the
// callers are decided locally, and once Redis thaws the probes close it.
func TestAHungRedisOpensTheBreaker(t *testing.T) {
	p := startPrivateRedis(t)
	primary, err := redisstore.New(portalLikeClient(t, p), redisstore.Options{Prefix: "hung:"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { primary.Close() })
	reg := prometheus.NewRegistry()
	store := failover.New(primary, failover.Options{
		Local: memstore.New(memstore.Options{}), Registerer: reg,
	})
	req := enforce.Request{Subject: "key:hung", Route: "GET /api/search",
		Limits: []enforce.Limit{{Name: "l", Algorithm: enforce.FixedWindow, Limit: 1e9, Window: time.Hour}}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := store.Allow(context.Background(), req); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()

	waitState := func(want string) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); store.BreakerState() != want; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("breaker %s after 30 s, want %s", store.BreakerState(), want)
			}
		}
	}
	p.freeze()
	waitState("open")
	if got := gatherValue(t, reg, "sluice_store_breaker_opens_total", map[string]string{"reason": "timeouts"}); got != 1 {
		t.Errorf("opens{reason=timeouts} = %v, want 1", got)
	}
	p.thaw()
	waitState("closed")
}
