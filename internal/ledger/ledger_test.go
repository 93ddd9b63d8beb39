package ledger_test

import (
	"context"
	"errors"
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

func monthly(subject string, limit int64) enforce.Request {
	return enforce.Request{Subject: subject, Route: "GET /api/search", Limits: []enforce.Limit{
		{Name: "relq-monthly", Algorithm: enforce.Quota, Period: enforce.PeriodMonth, Limit: limit},
	}, Anchor: time.Date(2024, 1, 15, 0, 0, 0, 0, time.UTC)}
}

// instance is one portal's stores over a private Redis and the test's
// Postgres.
type instance struct {
	redis  *redisstore.Store
	ledger *ledger.Ledger
}

func newInstance(t *testing.T, pool *pgxpool.Pool, addr string) instance {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	rs, err := redisstore.New(client, redisstore.Options{Prefix: "ledger:", DisableUsage: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close() })
	return instance{redis: rs, ledger: ledger.New(rs, pool, ledger.Options{Shared: rs})}
}

// spend allows req n times on s and returns how many were admitted and the
// last decision's remaining.
func spend(t *testing.T, s enforce.Store, req enforce.Request, n int) (admitted int, remaining int64) {
	t.Helper()
	for range n {
		d, err := s.Allow(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted++
		}
		remaining = d.Layers[0].Remaining
	}
	return admitted, remaining
}

// allowAfterRestart allows req once, waiting out the store's reconnection.
func allowAfterRestart(t *testing.T, s enforce.Store, req enforce.Request) enforce.Decision {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		d, err := s.Allow(context.Background(), req)
		if err == nil {
			return d
		}
		if !errors.Is(err, enforce.ErrStoreUnavailable) || time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestLostQuotaCounterIsRebuiltFromTheLedger(t *testing.T) {
	testenv.RealRedis(t, "a private redis-server restarted empty")
	pool := testenv.Postgres(t)
	ctx := context.Background()
	const limit, spent = 1000, 401

	t.Run("RestartedEmptyAfterAFlush", func(t *testing.T) {
		pr := testenv.StartPrivateRedis(t)
		in := newInstance(t, pool, pr.Addr)
		req := monthly("dev:flushed", limit)
		if got, r := spend(t, in.ledger, req, spent); got != spent || r != limit-spent {
			t.Fatalf("spent %d (remaining %d), want %d (remaining %d)", got, r, spent, limit-spent)
		}
		if err := in.ledger.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		pr.Restart(t)
		d := allowAfterRestart(t, in.ledger, req)
		if !d.Allowed || d.Layers[0].Remaining != limit-spent-1 {
			t.Fatalf("first decision after the restart: allowed %v, remaining %d; want admitted, remaining %d", d.Allowed, d.Layers[0].Remaining, limit-spent-1)
		}
		p, err := in.redis.Peek(ctx, req)
		if err != nil || p.Layers[0].Remaining != limit-spent-1 {
			t.Fatalf("Redis's counter after the rebuild: remaining %d (%v), want %d", p.Layers[0].Remaining, err, limit-spent-1)
		}
	})
	t.Run("FlushedAllBeforeTheTallyWasWritten", func(t *testing.T) {
		pr := testenv.StartPrivateRedis(t)
		in := newInstance(t, pool, pr.Addr)
		req := monthly("dev:unflushed", limit)
		spend(t, in.ledger, req, spent)
		c := redis.NewClient(&redis.Options{Addr: pr.Addr})
		defer c.Close()
		if err := c.FlushAll(ctx).Err(); err != nil { // a private server: nothing else on it
			t.Fatal(err)
		}
		d := allowAfterRestart(t, in.ledger, req)
		if d.Layers[0].Remaining != limit-spent-1 {
			t.Fatalf("remaining %d after FLUSHALL, want %d", d.Layers[0].Remaining, limit-spent-1)
		}
	})
	t.Run("ExhaustedQuotaStaysExhausted", func(t *testing.T) {
		pr := testenv.StartPrivateRedis(t)
		in := newInstance(t, pool, pr.Addr)
		req := monthly("dev:exhausted", 10)
		spend(t, in.ledger, req, 10)
		if err := in.ledger.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		pr.Restart(t)
		d := allowAfterRestart(t, in.ledger, req)
		admitted, _ := spend(t, in.ledger, req, 20)
		if d.Allowed || admitted != 0 {
			t.Fatalf("after the restart: first decision allowed %v, then %d of 20 admitted; want none", d.Allowed, admitted)
		}
		p, err := in.redis.Peek(ctx, req)
		if err != nil || p.Layers[0].Remaining != 0 || p.Allowed {
			t.Fatalf("Redis's counter: remaining %d, allowed %v (%v); want exhausted", p.Layers[0].Remaining, p.Allowed, err)
		}
	})
	t.Run("AnotherInstancesUnflushedTallyIsTheBound", func(t *testing.T) {
		pr := testenv.StartPrivateRedis(t)
		a, b := newInstance(t, pool, pr.Addr), newInstance(t, pool, pr.Addr)
		req := monthly("dev:two", limit)
		spend(t, a.ledger, req, 5)
		spend(t, b.ledger, req, 3)
		if err := a.ledger.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		pr.Restart(t)
		// b's 3 are in no ledger row yet: the most a rebuild can miss is
		// another instance's last flush interval.
		d := allowAfterRestart(t, a.ledger, req)
		if got := d.Layers[0].Remaining; got != limit-5-1 {
			t.Fatalf("remaining %d, want %d (b's unflushed 3 missing)", got, limit-5-1)
		}
		if err := b.ledger.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		var used int64
		if err := pool.QueryRow(ctx, `SELECT used FROM quota_ledger WHERE subject = 'dev:two'`).Scan(&used); err != nil {
			t.Fatal(err)
		}
		if err := a.ledger.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if err := pool.QueryRow(ctx, `SELECT used FROM quota_ledger WHERE subject = 'dev:two'`).Scan(&used); err != nil || used != 9 {
			t.Fatalf("ledger holds %d (%v), want all 9 admissions", used, err)
		}
	})
}

// switchable fails every call with ErrStoreUnavailable while down: a
// Redis cut off by the network, which keeps its counters.
type switchable struct {
	enforce.Store
	down atomic.Bool
}

func (s *switchable) Allow(ctx context.Context, req enforce.Request) (enforce.Decision, error) {
	if s.down.Load() {
		return enforce.Decision{}, enforce.ErrStoreUnavailable
	}
	return s.Store.Allow(ctx, req)
}

func TestLocalAdmissionsAreCountedAndWrittenBack(t *testing.T) {
	testenv.RealRedis(t, "a private redis-server")
	pool := testenv.Postgres(t)
	ctx := context.Background()
	const limit, spent, instances = 1000, 401, 2

	newFleet := func(t *testing.T, addr string) (*switchable, *redisstore.Store, *ledger.Ledger) {
		in := newInstance(t, pool, addr)
		sw := &switchable{Store: in.redis}
		mem := memstore.New(memstore.Options{})
		fo := failover.New(sw, failover.Options{Local: mem, Instances: instances, Cooldown: time.Millisecond})
		return sw, in.redis, ledger.New(fo, pool, ledger.Options{Shared: in.redis, Local: mem})
	}

	t.Run("CutOffThenBack", func(t *testing.T) {
		pr := testenv.StartPrivateRedis(t)
		sw, rs, l := newFleet(t, pr.Addr)
		req := monthly("dev:cut", limit)
		spend(t, l, req, spent)
		sw.down.Store(true)
		// Each of the 2 instances gets half of the 599 left: 300.
		d, err := l.Allow(ctx, req)
		if err != nil || !d.Local || d.Layers[0].Remaining != 300-1 {
			t.Fatalf("first local decision: local %v, remaining %d (%v); want local, remaining %d", d.Local, d.Layers[0].Remaining, err, 300-1)
		}
		spend(t, l, req, 2)
		sw.down.Store(false)
		d, err = l.Allow(ctx, req)
		if err != nil || d.Local {
			t.Fatalf("back on Redis: local %v (%v)", d.Local, err)
		}
		if err := l.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		l.WriteBack(ctx)
		l.WriteBack(ctx) // a second pass adds nothing
		p, err := rs.Peek(ctx, req)
		if want := int64(limit - spent - 3 - 1); err != nil || p.Layers[0].Remaining != want {
			t.Fatalf("Redis's counter after the write-back: remaining %d (%v), want %d", p.Layers[0].Remaining, err, want)
		}
	})
	t.Run("RestartedEmptyDuringTheOutage", func(t *testing.T) {
		pr := testenv.StartPrivateRedis(t)
		sw, rs, l := newFleet(t, pr.Addr)
		req := monthly("dev:restarted", limit)
		spend(t, l, req, spent)
		sw.down.Store(true)
		spend(t, l, req, 3)
		pr.Restart(t)
		allowAfterRestart(t, rs, monthly("dev:warm-up", limit)) // reconnected
		sw.down.Store(false)
		d := allowAfterRestart(t, l, req)
		if d.Local || d.Layers[0].Remaining != limit-spent-3-1 {
			t.Fatalf("after the restart: local %v, remaining %d; want Redis's, remaining %d", d.Local, d.Layers[0].Remaining, limit-spent-3-1)
		}
		if err := l.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		l.WriteBack(ctx) // owes nothing: the rebuild held the local admissions
		d = allowAfterRestart(t, l, req)
		if d.Layers[0].Remaining != limit-spent-3-2 {
			t.Fatalf("after the write-back: remaining %d, want %d", d.Layers[0].Remaining, limit-spent-3-2)
		}
	})
}

// TestAdjustmentsSurviveARebuild: an operator's reset is not undone by the
// next decision (which finds the counter at zero, as after a loss), and a
// grant outlives a Redis restart.
func TestAdjustmentsSurviveARebuild(t *testing.T) {
	testenv.RealRedis(t, "a private redis-server restarted empty")
	pool := testenv.Postgres(t)
	ctx := context.Background()
	const limit = 100

	t.Run("Reset", func(t *testing.T) {
		pr := testenv.StartPrivateRedis(t)
		in := newInstance(t, pool, pr.Addr)
		req := monthly("dev:reset", limit)
		spend(t, in.ledger, req, 40)
		if err := in.ledger.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		spend(t, in.ledger, req, 5) // still in the tally
		if _, err := in.ledger.ResetQuota(ctx, req); err != nil {
			t.Fatal(err)
		}
		if _, r := spend(t, in.ledger, req, 1); r != limit-1 {
			t.Fatalf("after the reset: remaining %d, want %d", r, limit-1)
		}
		if err := in.ledger.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		pr.Restart(t)
		if d := allowAfterRestart(t, in.ledger, req); d.Layers[0].Remaining != limit-2 {
			t.Fatalf("after a restart: remaining %d, want %d", d.Layers[0].Remaining, limit-2)
		}
	})
	t.Run("Grant", func(t *testing.T) {
		pr := testenv.StartPrivateRedis(t)
		in := newInstance(t, pool, pr.Addr)
		req := monthly("dev:grant", limit)
		spend(t, in.ledger, req, 40)
		if _, err := in.ledger.GrantQuota(ctx, req, 30); err != nil {
			t.Fatal(err)
		}
		if err := in.ledger.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		pr.Restart(t)
		if d := allowAfterRestart(t, in.ledger, req); d.Layers[0].Remaining != limit-40+30-1 {
			t.Fatalf("after a restart: remaining %d, want %d", d.Layers[0].Remaining, limit-40+30-1)
		}
	})
}
