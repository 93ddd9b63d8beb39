//go:build chaos

// Package chaos breaks the parts a Sluice deployment depends on, one at a
// time, under two instances deciding for one subject, and counts: the
// admissions of a window stay within the bound docs/failure.md states,
// and no quota consumption is lost (the ledger holds every admission, and
// Redis's quota counter agrees with it once the fault is over). Run it
// with scripts/chaos.sh (go test -tags chaos ./tests/chaos); it needs
// redis-server on PATH and the test Postgres.
package chaos

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/failover"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/enforce/redisstore"
	"github.com/sluicehq/sluice/internal/ledger"
	"github.com/sluicehq/sluice/internal/testenv"
)

const (
	instances = 2
	window    = 20   // the fixed window's limit (an hour long: no boundary mid-test)
	quota     = 1000 // the monthly quota
	timeout   = 300 * time.Millisecond
	callers   = 8 // concurrent callers of the one subject
)

// perInstance is what each instance admits alone in a window (local).
const perInstance = (window + instances - 1) / instances

// instance is one portal's decision path: Redis behind the breaker with a
// local store, behind the ledger.
type instance struct {
	redis  *redisstore.Store
	fo     *failover.Store
	ledger *ledger.Ledger
}

func newInstance(t *testing.T, addr string, pool *pgxpool.Pool, prefix string) *instance {
	t.Helper()
	opts := &redis.UniversalOptions{Addrs: []string{addr}, ContextTimeoutEnabled: true, DialTimeout: time.Second,
		ReadTimeout: timeout, WriteTimeout: timeout}
	redisstore.FailFast(opts)
	client := redis.NewUniversalClient(opts)
	t.Cleanup(func() { _ = client.Close() })
	rs, err := redisstore.New(client, redisstore.Options{Prefix: prefix, Timeout: timeout, DisableUsage: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close() })
	mem := memstore.New(memstore.Options{})
	fo := failover.New(rs, failover.Options{Local: mem, Instances: instances, Timeout: timeout, Cooldown: 100 * time.Millisecond})
	return &instance{redis: rs, fo: fo, ledger: ledger.New(fo, pool, ledger.Options{Shared: rs, Local: mem})}
}

func request(subject string) enforce.Request {
	return enforce.Request{Subject: subject, Route: "GET /api/search", Limits: []enforce.Limit{
		{Name: "hourly", Algorithm: enforce.FixedWindow, Limit: window, Window: time.Hour},
		{Name: "monthly", Algorithm: enforce.Quota, Period: enforce.PeriodMonth, Limit: quota},
	}}
}

// fleet is the two instances and what they admitted.
type fleet struct {
	t     *testing.T
	pool  *pgxpool.Pool
	inst  []*instance
	req   enforce.Request
	total atomic.Int64
}

func newFleet(t *testing.T, addr, subject string) *fleet {
	pool := testenv.Postgres(t)
	f := &fleet{t: t, pool: pool, req: request(subject)}
	for range instances {
		f.inst = append(f.inst, newInstance(t, addr, pool, "chaos:"))
	}
	return f
}

// hammer sends n requests over the instances from 8 callers and returns
// how many Redis admitted and how many the local stores did.
func (f *fleet) hammer(n int) (shared, local int64) {
	var wg sync.WaitGroup
	var next atomic.Int64
	var s, l atomic.Int64
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				in := f.inst[i%instances]
				d, err := in.ledger.Allow(context.Background(), f.req)
				if err != nil {
					f.t.Errorf("decision failed: %v", err)
					return
				}
				if d.Allowed {
					f.total.Add(1)
					if d.Local {
						l.Add(1)
					} else {
						s.Add(1)
					}
				}
			}
		}()
	}
	wg.Wait()
	return s.Load(), l.Load()
}

// recover waits until every instance decides on Redis again.
func (f *fleet) recover() {
	f.t.Helper()
	probe := f.req
	probe.Subject += ":probe"
	deadline := time.Now().Add(20 * time.Second)
	for _, in := range f.inst {
		for {
			d, err := in.fo.Peek(context.Background(), probe)
			if err == nil && !d.Local {
				break
			}
			if time.Now().After(deadline) {
				f.t.Fatalf("instances still not on Redis after 20 s: %v", err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// settle flushes every ledger (retrying while Postgres is away) and writes
// local admissions back.
func (f *fleet) settle() {
	f.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for _, in := range f.inst {
		for {
			err := in.ledger.Flush(context.Background())
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				f.t.Fatalf("ledger flush: %v", err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		in.ledger.WriteBack(context.Background())
	}
}

// ledgerUsed is the quota consumption the ledger holds.
func (f *fleet) ledgerUsed() int64 {
	f.t.Helper()
	var used int64
	err := f.pool.QueryRow(context.Background(), `SELECT coalesce(sum(used), 0) FROM quota_ledger WHERE subject = $1`, f.req.Subject).Scan(&used)
	if err != nil {
		f.t.Fatal(err)
	}
	return used
}

// redisUsed is the quota consumption Redis's counter holds.
func (f *fleet) redisUsed() int64 {
	f.t.Helper()
	q := f.req
	q.Limits = q.Limits[1:]
	d, err := f.inst[0].redis.Peek(context.Background(), q)
	if err != nil {
		f.t.Fatal(err)
	}
	return quota - d.Layers[0].Remaining
}

// TestRedisKilledThenRestartedEmpty: Redis is killed mid-window, the
// instances decide locally, and it comes back empty. The window admits at
// most 2L + N*ceil(L/N); the ledger holds every admission and Redis's
// quota counter, rebuilt from it, equals it.
func TestRedisKilledThenRestartedEmpty(t *testing.T) {
	r := startRedis(t)
	f := newFleet(t, r.addr, "dev:killed")
	shared, _ := f.hammer(3 * window)
	r.kill()
	_, local := f.hammer(6 * window)
	f.settle() // the flush interval passes while Redis is down
	r.start()
	f.recover()
	shared2, local2 := f.hammer(3 * window)
	got := shared + local + shared2 + local2
	if bound := int64(2*window + instances*perInstance); got > bound || shared != window {
		t.Errorf("window admitted %d (%d by Redis, %d locally, then %d by Redis, %d locally), want at most %d with %d by Redis first",
			got, shared, local, shared2, local2, bound, window)
	}
	f.settle()
	if used, total := f.ledgerUsed(), f.total.Load(); used != total {
		t.Errorf("ledger holds %d, %d were admitted", used, total)
	}
	f.checkCounter()
	t.Logf("killed and restarted empty: %d by Redis, %d locally, then %d by Redis, %d locally; ledger %d", shared, local, shared2, local2, f.ledgerUsed())
}

// TestRedisFrozen: Redis is stopped with SIGSTOP (a hung host) and thawed
// with its counters. The window admits at most L + N*ceil(L/N); the local
// admissions are written back to Redis's quota counter, which may also
// hold decisions that timed out and ran when Redis thawed (each decided
// locally once), never fewer than the ledger.
func TestRedisFrozen(t *testing.T) {
	r := startRedis(t)
	f := newFleet(t, r.addr, "dev:frozen")
	shared, _ := f.hammer(3 * window)
	r.freeze()
	const frozen = 2 * window
	_, local := f.hammer(frozen)
	r.thaw()
	f.recover()
	shared2, local2 := f.hammer(3 * window)
	got := shared + local + shared2 + local2
	if bound := int64(window + instances*perInstance); got > bound || shared2 != 0 {
		t.Errorf("window admitted %d (%d by Redis, %d locally, then %d by Redis, %d locally), want at most %d, none by Redis after the thaw",
			got, shared, local, shared2, local2, bound)
	}
	f.settle()
	used, total := f.ledgerUsed(), f.total.Load()
	if used != total {
		t.Errorf("ledger holds %d, %d were admitted", used, total)
	}
	if r := f.redisUsed(); r < used || r > used+frozen {
		t.Errorf("Redis's quota counter holds %d, want the ledger's %d up to %d", r, used, used+frozen)
	}
	t.Logf("frozen: %d by Redis, %d locally, then %d by Redis, %d locally; ledger %d, Redis %d", shared, local, shared2, local2, used, f.redisUsed())
}

// TestPostgresCutOff: the ledger's Postgres is unreachable (a proxy in
// front of it drops every connection) while requests are admitted; the
// flushes fail and keep the tally, and once Postgres answers the ledger
// holds every admission.
func TestPostgresCutOff(t *testing.T) {
	r := startRedis(t)
	base := testenv.Postgres(t)
	proxy := startProxy(t, base.Config().ConnConfig.Host, base.Config().ConnConfig.Port)
	cfg := base.Config().Copy()
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = "127.0.0.1", proxy.port()
	cfg.ConnConfig.ConnectTimeout = time.Second
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	f := &fleet{t: t, pool: base, req: request("dev:pgcut")}
	for range instances {
		f.inst = append(f.inst, newInstance(t, r.addr, pool, "chaos:"))
	}
	f.hammer(window / 2)
	proxy.cut()
	f.hammer(window)
	for _, in := range f.inst {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		err := in.ledger.Flush(ctx)
		cancel()
		if err == nil {
			t.Error("a flush succeeded with Postgres cut off")
		}
	}
	f.hammer(window)
	proxy.restore()
	f.settle()
	if used, total := f.ledgerUsed(), f.total.Load(); used != total || total != window {
		t.Errorf("ledger holds %d, %d were admitted (want the window's %d)", used, total, window)
	}
	f.checkCounter()
}

// checkCounter compares Redis's quota counter with the ledger: never
// below it, and above it by at most the decisions one instance had in
// flight when it rebuilt the counter (callers), which the rebuild may
// count twice.
func (f *fleet) checkCounter() {
	f.t.Helper()
	if r, l := f.redisUsed(), f.ledgerUsed(); r < l || r > l+callers {
		f.t.Errorf("Redis's quota counter holds %d, the ledger %d; want %d to %d", r, l, l, l+callers)
	}
}
