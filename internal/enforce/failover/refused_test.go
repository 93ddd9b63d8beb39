package failover_test

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/failover"
	"github.com/sluicehq/sluice/internal/enforce/redisstore"
	"github.com/sluicehq/sluice/internal/testenv"
)

// TestARefusingRedisFailsDecisionsAtOnce kills a private redis-server
// behind a client set up as the portal's (FailFast) and counts what each
// decision costs: at most two connection attempts (the pipeline's own and
// go-redis's, one each), every failure a refused connection, and the
// breaker opens naming it.
func TestARefusingRedisFailsDecisionsAtOnce(t *testing.T) {
	testenv.RealRedis(t, "a private redis-server that is killed")
	pr := testenv.StartPrivateRedis(t)
	var dials atomic.Int64
	opts := &redis.UniversalOptions{
		Addrs: []string{pr.Addr}, ContextTimeoutEnabled: true, DialTimeout: 2 * time.Second,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	}
	redisstore.FailFast(opts)
	client := redis.NewUniversalClient(opts)
	t.Cleanup(func() { _ = client.Close() })
	rs, err := redisstore.New(client, redisstore.Options{Prefix: "refused:", DisableUsage: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close() })
	reg := prometheus.NewRegistry()
	fo := failover.New(rs, failover.Options{Registerer: reg, Cooldown: time.Hour})
	req := enforce.Request{Subject: "ip:192.0.2.1", Limits: []enforce.Limit{
		{Name: "fw", Algorithm: enforce.FixedWindow, Limit: 1000, Window: time.Minute}}}
	if _, err := fo.Allow(context.Background(), req); err != nil {
		t.Fatal(err)
	}

	pr.Stop()
	dials.Store(0)
	decisions, refused := 0, 0
	for fo.BreakerState() == "closed" && decisions < 200 {
		_, err := fo.Allow(context.Background(), req)
		decisions++
		if !errors.Is(err, enforce.ErrStoreUnavailable) {
			t.Fatalf("decision %d with Redis down: %v, want ErrStoreUnavailable", decisions, err)
		}
		if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) {
			refused++
		}
	}
	if got := dials.Load(); got > int64(2*decisions) {
		t.Errorf("%d decisions dialed %d times, want at most 2 each", decisions, got)
	}
	// The first decision may find the pipeline's connection reset; every
	// other one is refused.
	if refused < decisions-1 {
		t.Errorf("%d of %d failures were refused or reset connections", refused, decisions)
	}
	if got := gatherValue(t, reg, "sluice_store_breaker_opens_total", map[string]string{"reason": "refused"}); got != 1 {
		t.Errorf("breaker opened %v times for reason refused after %d decisions (state %s), want once", got, decisions, fo.BreakerState())
	}
}
