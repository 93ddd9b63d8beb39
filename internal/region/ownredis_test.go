package region_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/failover"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/enforce/redisstore"
	"github.com/sluicehq/sluice/internal/region"
)

// TestSyncRegionWhoseOwnRedisDiesHoldsToItsShare kills one sync region's
// own Redis for three windows: that region decides on its local store,
// which (region.LocalShare) holds it to its share, 50 of 100, while the
// other region, which can no longer publish to it, holds to its share as
// well; so a window wholly in the outage admits at most the sum of the
// shares, not the 150 a local store on the whole limit let through. The
// region's Redis then returns empty and the regions count each other
// again.
func TestSyncRegionWhoseOwnRedisDiesHoldsToItsShare(t *testing.T) {
	weights := []region.Weight{{Name: "eu", Weight: 1}, {Name: "us", Weight: 1}}
	c := newCluster(t, region.Sync, weights)
	eu := c.regions[0]
	// eu's store as the portal builds it: Redis behind a FailoverStore
	// whose local store is held to the region's share.
	cfg := region.Config{Region: "eu", Regions: weights, Mode: region.Sync, Interval: 100 * time.Millisecond}
	opts := &redis.UniversalOptions{Addrs: []string{eu.redis.Addr}, ContextTimeoutEnabled: true}
	redisstore.FailFast(opts)
	client := redis.NewUniversalClient(opts)
	t.Cleanup(func() { _ = client.Close() })
	rs, err := redisstore.New(client, redisstore.Options{Prefix: "sluice:", Now: c.clock.now, DisableUsage: true, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close() })
	mem := memstore.New(memstore.Options{Now: c.clock.now})
	fo := failover.New(rs, failover.Options{Local: region.LocalShare(mem, cfg), Instances: 1, Cooldown: 10 * time.Millisecond})
	var peers []region.PeerStore
	for _, p := range eu.proxies {
		pc := redis.NewClient(&redis.Options{Addr: p.addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = pc.Close() })
		ps, err := redisstore.New(pc, redisstore.Options{Prefix: "sluice:", Now: c.clock.now, DisableUsage: true, Timeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ps.Close() })
		peers = append(peers, region.PeerStore{Name: "us", Charger: ps, Ping: func(ctx context.Context) error { return pc.Ping(ctx).Err() }})
	}
	eu.store, err = region.New(fo, cfg, peers, nil)
	if err != nil {
		t.Fatal(err)
	}

	l := limitFor(enforce.FixedWindow)
	between := func(w, s int) {
		switch {
		case w == 1 && s == 0:
			eu.redis.Stop()
		case w == 4 && s == 0:
			eu.redis.Restart(t)
		}
	}
	admitted, o := c.drive(t, l, 7, 10, between)
	for _, w := range []int{2, 3} {
		if admitted[w] > 100 {
			t.Errorf("window %d, eu's Redis down: admitted %d, want at most the sum of the shares, 100 (per window %v)", w, admitted[w], admitted)
		}
		if admitted[w] < 90 {
			t.Errorf("window %d, eu's Redis down: admitted %d, want the regions to keep about their shares (per window %v)", w, admitted[w], admitted)
		}
	}
	for _, w := range []int{0, 6} {
		if admitted[w] < l.Limit || admitted[w] > l.Limit+o {
			t.Errorf("window %d, both up: admitted %d, want %d to %d (per window %v)", w, admitted[w], l.Limit, l.Limit+o, admitted)
		}
	}
	t.Logf("eu's Redis down in windows 1-3: admitted per window %v", admitted)
}
