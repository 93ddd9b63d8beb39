package region_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/httplimit"
	"github.com/sluicehq/sluice/internal/enforce/redisstore"
	"github.com/sluicehq/sluice/internal/region"
	"github.com/sluicehq/sluice/internal/testenv"
)

// interRegionDelay is the one-way latency the proxies add between regions.
const interRegionDelay = 40 * time.Millisecond

// testRegion is one region: its own redis-server, its store, and (in sync
// mode) a delaying proxy to each peer's Redis.
type testRegion struct {
	name    string
	redis   *testenv.PrivateRedis
	store   *region.Store
	proxies []*delayProxy
}

type cluster struct {
	clock   *fakeClock
	regions []*testRegion
}

// newCluster starts one private Redis per region and a region.Store over
// each, all on one fake clock aligned on a second.
func newCluster(t *testing.T, mode region.Mode, weights []region.Weight) *cluster {
	t.Helper()
	c := &cluster{clock: &fakeClock{t: time.Unix(1_699_999_980, 0)}} // a whole minute: windows start on it
	for _, w := range weights {
		c.regions = append(c.regions, &testRegion{name: w.Name, redis: testenv.StartPrivateRedis(t)})
	}
	for _, r := range c.regions {
		local := newRedisStore(t, r.redis.Addr, c.clock)
		var peers []region.PeerStore
		if mode == region.Sync {
			for _, q := range c.regions {
				if q == r {
					continue
				}
				proxy := startDelayProxy(t, q.redis.Addr, interRegionDelay)
				r.proxies = append(r.proxies, proxy)
				client := redis.NewClient(&redis.Options{
					Addr: proxy.addr(), MaxRetries: -1, DialTimeout: time.Second,
					ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second, ContextTimeoutEnabled: true,
				})
				t.Cleanup(func() { client.Close() })
				peer, err := redisstore.New(client, redisstore.Options{
					Prefix: "sluice:", Now: c.clock.now, DisableUsage: true, Timeout: 2 * time.Second,
				})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { peer.Close() })
				peers = append(peers, region.PeerStore{Name: q.name, Charger: peer, Ping: func(ctx context.Context) error {
					ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
					defer cancel()
					return client.Ping(ctx).Err()
				}})
			}
		}
		s, err := region.New(local, region.Config{Region: r.name, Regions: weights, Mode: mode, Interval: 100 * time.Millisecond}, peers, nil)
		if err != nil {
			t.Fatal(err)
		}
		r.store = s
	}
	return c
}

func newRedisStore(t *testing.T, addr string, clock *fakeClock) *redisstore.Store {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { client.Close() })
	s, err := redisstore.New(client, redisstore.Options{Prefix: "sluice:", Now: clock.now, DisableUsage: true, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// drive sends a client at twice l's limit, spread evenly over the regions
// (round robin), for windows windows of steps steps each; after each step
// every region runs one sync round and the clock moves a step. It returns
// the requests admitted in each window, and o, the most a region was
// offered in one step (the bound's term).
func (c *cluster) drive(t *testing.T, l enforce.Limit, windows, steps int, between func(window, step int)) ([]int64, int64) {
	t.Helper()
	ctx := context.Background()
	perStep := int(2*l.Limit) / steps
	R := len(c.regions)
	o := int64((perStep + R - 1) / R)
	admitted := make([]int64, windows)
	n := 0
	for w := range windows {
		for s := range steps {
			if between != nil {
				between(w, s)
			}
			for range perStep {
				r := c.regions[n%R]
				n++
				d, err := r.store.Allow(ctx, enforce.Request{Subject: "key:client", Limits: []enforce.Limit{l}})
				if err != nil {
					t.Fatalf("window %d step %d region %s: %v", w, s, r.name, err)
				}
				if d.Allowed {
					admitted[w]++
				}
			}
			c.sync()
			c.clock.advance(l.Window / time.Duration(steps))
		}
	}
	return admitted, o
}

// sync runs one publication round in every region at once.
func (c *cluster) sync() {
	var wg sync.WaitGroup
	for _, r := range c.regions {
		wg.Add(1)
		go func() { defer wg.Done(); r.store.Sync(context.Background()) }()
	}
	wg.Wait()
}

// limitFor is a 100-per-minute limit of alg; the leaky bucket gets a queue
// of 20, a round's refill (in reject mode: without one it admits one request
// per 600 ms).
//
// The window is a minute of the fake clock, not a second, because Redis
// expires the counters by its own clock: a key whose window ends in one
// fake second got a TTL of one real second, and on a starved host the ten
// steps of a window (each a sync over the 40 ms delaying proxy) took longer
// than that, so the counter vanished mid-window and the window admitted
// twice its limit (seen once: 200 in window 5 of
// TestSyncFallsBackToShareWhileAPeerIsCutOff).
func limitFor(alg enforce.Algorithm) enforce.Limit {
	l := enforce.Limit{Name: "plan", Algorithm: alg, Limit: 100, Window: time.Minute}
	if alg == enforce.LeakyBucket {
		l.Burst = 20
	}
	return l
}

// capacity is what alg admits at once on top of its rate: a bucket's
// capacity (a leaky bucket admits its queue plus the request in service).
func capacity(l enforce.Limit) int64 {
	switch l.Algorithm {
	case enforce.TokenBucket:
		if l.Burst == 0 {
			return l.Limit
		}
		return l.Burst
	case enforce.LeakyBucket:
		return l.Burst + 1
	}
	return 0
}

func isBucket(a enforce.Algorithm) bool { return a == enforce.TokenBucket || a == enforce.LeakyBucket }

// checkBound asserts what a client got, window by window for the windows,
// and summed up to each window's end for the buckets (whose limit is a rate
// plus a capacity): the bound is base + extra per window for the windows,
// capacity + n × rate + extra for the buckets.
func checkBound(t *testing.T, l enforce.Limit, admitted []int64, rate, capacity, extra int64) (worst int64) {
	t.Helper()
	var sum int64
	worst = -1 << 62
	for w, a := range admitted {
		sum += a
		var bound, got int64
		if isBucket(l.Algorithm) {
			bound, got = capacity+int64(w+1)*rate+extra, sum
		} else {
			bound, got = rate+extra, a
		}
		if got > bound {
			t.Errorf("window %d: admitted %d, above the bound %d (admitted per window %v)", w, got, bound, admitted)
		}
		if ex := got - (bound - extra); ex > worst {
			worst = ex
		}
	}
	return worst
}

// TestShareHoldsEachRegionToItsShare runs three regions weighted 2:1:1 in
// share mode with a client at twice the limit spread evenly: each region
// admits its share (50, 25 and 25 of 100) and shows it in the layer that
// makes the headers, so the regions together never pass the limit.
func TestShareHoldsEachRegionToItsShare(t *testing.T) {
	weights := []region.Weight{{Name: "eu", Weight: 2}, {Name: "us", Weight: 1}, {Name: "ap", Weight: 1}}
	shares := map[string]int64{"eu": 50, "us": 25, "ap": 25}
	for _, alg := range enforce.RateAlgorithms {
		t.Run(string(alg), func(t *testing.T) {
			c := newCluster(t, region.Share, weights)
			l := limitFor(alg)
			for _, r := range c.regions {
				d, err := r.store.Peek(context.Background(), enforce.Request{Subject: "key:client", Limits: []enforce.Limit{l}})
				if err != nil {
					t.Fatal(err)
				}
				if got := d.Layers[0].Limit.Limit; got != shares[r.name] {
					t.Errorf("region %s shows a limit of %d, want its share %d", r.name, got, shares[r.name])
				}
			}
			admitted, _ := c.drive(t, l, 5, 10, nil)
			var capSum int64
			for _, r := range c.regions {
				capSum += capacity(r.store.ShareLimit(l))
			}
			checkBound(t, l, admitted, 100, capSum, 0)
			if alg == enforce.FixedWindow {
				for w, a := range admitted {
					if a != 100 {
						t.Errorf("window %d: admitted %d, want exactly the sum of the shares, 100", w, a)
					}
				}
			}
			t.Logf("share %s: admitted per window %v", alg, admitted)
		})
	}
}

// TestSyncKeepsTheStatedBound runs three regions in sync mode, 40 ms apart,
// publishing five times a window, with a client at twice the limit spread
// evenly, for every algorithm over six windows. The stated bound: a window
// admits at most limit + (R-1) × o, where o is what the client sends one
// region in one interval (a bucket: capacity + n × rate + (R-1) × o by the
// end of window n). The windows also reach the limit: the peers' counts
// are not lost on the way.
func TestSyncKeepsTheStatedBound(t *testing.T) {
	weights := []region.Weight{{Name: "eu", Weight: 1}, {Name: "us", Weight: 1}, {Name: "ap", Weight: 1}}
	for _, alg := range enforce.RateAlgorithms {
		t.Run(string(alg), func(t *testing.T) {
			t.Parallel()
			c := newCluster(t, region.Sync, weights)
			l := limitFor(alg)
			const windows = 6
			// Five rounds a window: the client's 40 a round never meet
			// the limit at a round's end, so the regions over-admit in
			// the round that crosses it, as far as the bound allows.
			admitted, o := c.drive(t, l, windows, 5, nil)
			extra := int64(len(c.regions)-1) * o
			worst := checkBound(t, l, admitted, l.Limit, capacity(l), extra)
			var total int64
			for _, a := range admitted {
				total += a
			}
			if alg == enforce.FixedWindow {
				for w, a := range admitted {
					if a < l.Limit {
						t.Errorf("window %d: admitted %d, below the limit %d", w, a, l.Limit)
					}
				}
			}
			// Every algorithm lets the client have most of its limit: a
			// region that dropped its peers' counts would show here as
			// nothing, and one that lost its own as R times the limit.
			if total < windows*l.Limit*8/10 {
				t.Errorf("admitted %d over %d windows, want at least 80%% of %d", total, windows, windows*l.Limit)
			}
			for _, r := range c.regions {
				st := r.store.Status()
				if st.Degraded {
					t.Errorf("region %s degraded with every peer up", r.name)
				}
				for _, p := range st.Peers {
					if !p.Reachable || p.Published == 0 || p.Backlog != 0 {
						t.Errorf("region %s peer %s: %+v, want reachable, published to, no backlog", r.name, p.Name, p)
					}
				}
			}
			t.Logf("sync %s: admitted per window %v; bound +%d, worst measured %+d", alg, admitted, extra, worst)
		})
	}
}

// TestSyncFallsBackToShareWhileAPeerIsCutOff cuts the link between two
// sync regions for three windows: once a round finds the peer gone, each
// region holds to its share (50 of 100), so a window wholly cut off admits
// exactly the sum of the shares; when the link returns the backlog is
// published, the regions count each other again, and the bound holds.
func TestSyncFallsBackToShareWhileAPeerIsCutOff(t *testing.T) {
	weights := []region.Weight{{Name: "eu", Weight: 1}, {Name: "us", Weight: 1}}
	c := newCluster(t, region.Sync, weights)
	l := limitFor(enforce.FixedWindow)
	var midCut, midBack []region.Status
	between := func(w, s int) {
		switch {
		case w == 1 && s == 0:
			for _, r := range c.regions {
				for _, p := range r.proxies {
					p.cutOff()
				}
			}
		case w == 2 && s == 5:
			for _, r := range c.regions {
				midCut = append(midCut, r.store.Status())
			}
		case w == 4 && s == 0:
			for _, r := range c.regions {
				for _, p := range r.proxies {
					p.restore()
				}
			}
		case w == 5 && s == 5:
			for _, r := range c.regions {
				midBack = append(midBack, r.store.Status())
			}
		}
	}
	admitted, o := c.drive(t, l, 7, 10, between)
	for _, w := range []int{2, 3} {
		if admitted[w] != 100 {
			t.Errorf("window %d, cut off: admitted %d, want the sum of the shares, 100 (per window %v)", w, admitted[w], admitted)
		}
	}
	for _, w := range []int{0, 5, 6} {
		if admitted[w] < l.Limit || admitted[w] > l.Limit+o {
			t.Errorf("window %d, linked: admitted %d, want %d to %d (per window %v)", w, admitted[w], l.Limit, l.Limit+o, admitted)
		}
	}
	reg := prometheus.NewPedanticRegistry()
	if err := c.regions[0].store.Register(reg); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			got[f.GetName()] = v
		}
	}
	for name, want := range map[string]float64{"sluice_region_degraded": 0, "sluice_region_peer_reachable": 1, "sluice_region_backlog_subjects": 0} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("metric %s = %v (present %v) after the link returned, want %v", name, v, ok, want)
		}
	}
	if got["sluice_region_published_units_total"] < 150 {
		// eu admits half of each window: 50 in each of windows 0, 5, 6.
		t.Errorf("published %v units, want at least the 150 eu admitted in its wholly linked windows", got["sluice_region_published_units_total"])
	}
	for _, st := range midCut {
		if !st.Degraded || len(st.Peers) != 1 || st.Peers[0].Reachable || st.Peers[0].Backlog == 0 {
			t.Errorf("region %s while cut off: %+v, want degraded, the peer unreachable with a backlog", st.Region, st)
		}
	}
	for _, st := range midBack {
		if st.Degraded || st.Peers[0].Backlog != 0 || !st.Peers[0].Reachable {
			t.Errorf("region %s after the link returned: %+v, want every peer reachable, no backlog", st.Region, st)
		}
	}
	t.Logf("cut off in windows 1-3: admitted per window %v", admitted)
}

// TestConfigValidate names what is wrong with a region configuration.
func TestConfigValidate(t *testing.T) {
	two := []region.Weight{{Name: "eu", Weight: 2}, {Name: "us", Weight: 1}}
	cases := []struct {
		name  string
		cfg   region.Config
		peers []string
		want  string
	}{
		{"UnknownMode", region.Config{Mode: "async"}, nil, `mode "async" is not shared, share or sync`},
		{"RegionNotListed", region.Config{Mode: region.Share, Region: "ap", Regions: two}, nil, `region "ap" is not in the region list`},
		{"SyncMissingPeer", region.Config{Mode: region.Sync, Region: "eu", Regions: two}, nil, `sync needs the Redis URL of region "us"`},
		{"SyncPeerIsSelf", region.Config{Mode: region.Sync, Region: "eu", Regions: two}, []string{"eu"}, `peer "eu" is this region`},
		{"SyncUnknownPeer", region.Config{Mode: region.Sync, Region: "eu", Regions: two}, []string{"us", "ap"}, `peer "ap" is not in the region list`},
		{"IntervalTooShort", region.Config{Mode: region.Sync, Region: "eu", Regions: two, Interval: time.Millisecond}, []string{"us"}, "sync interval 1ms is below 10ms"},
		{"Valid", region.Config{Mode: region.Sync, Region: "eu", Regions: two}, []string{"us"}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate(tc.peers)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tc.want {
				t.Fatalf("Validate: %q, want %q", got, tc.want)
			}
		})
	}
}

// TestParseRegions reads weights and refuses what is not a region list.
func TestParseRegions(t *testing.T) {
	got, err := region.ParseRegions("eu=2, us")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[{eu 2} {us 1}]" {
		t.Fatalf("ParseRegions: %v", got)
	}
	for _, bad := range []string{"", "eu=0", "eu=x", "eu,eu", "e u=1", "eu=2000000"} {
		if _, err := region.ParseRegions(bad); err == nil {
			t.Errorf("ParseRegions(%q) accepted", bad)
		}
	}
	peers, err := region.ParsePeers("us=redis://us:6379, ap=redis://ap:6379")
	if err != nil || len(peers) != 2 || peers[0].Name != "ap" || peers[1].URL != "redis://us:6379" {
		t.Fatalf("ParsePeers: %v %v", peers, err)
	}
	for _, bad := range []string{"us", "us=", "us=redis://a,us=redis://b", "=redis://a"} {
		if _, err := region.ParsePeers(bad); err == nil {
			t.Errorf("ParsePeers(%q) accepted", bad)
		}
	}
}

// TestSyncHoldsSubjectsBeyondThePendingTableToTheShare fills the table of
// consumption awaiting publication (one subject) and checks that a second
// subject is then held to the share (its layer shows 50 of 100) and not
// published, while the first is published as usual.
func TestSyncHoldsSubjectsBeyondThePendingTableToTheShare(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1_699_999_980, 0)}
	eu, us := testenv.StartPrivateRedis(t), testenv.StartPrivateRedis(t)
	weights := []region.Weight{{Name: "eu", Weight: 1}, {Name: "us", Weight: 1}}
	peerClient := redis.NewClient(&redis.Options{Addr: us.Addr, MaxRetries: -1})
	t.Cleanup(func() { peerClient.Close() })
	usStore := newRedisStore(t, us.Addr, clock)
	s, err := region.New(newRedisStore(t, eu.Addr, clock), region.Config{Region: "eu", Regions: weights, Mode: region.Sync, MaxPending: 1},
		[]region.PeerStore{{Name: "us", Charger: usStore, Ping: func(ctx context.Context) error { return peerClient.Ping(ctx).Err() }}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l := limitFor(enforce.FixedWindow)
	allow := func(subject string) enforce.Decision {
		t.Helper()
		d, err := s.Allow(ctx, enforce.Request{Subject: subject, Limits: []enforce.Limit{l}})
		if err != nil || !d.Allowed {
			t.Fatalf("%s: %v %+v", subject, err, d)
		}
		return d
	}
	if d := allow("key:first"); d.Layers[0].Limit.Limit != 100 {
		t.Fatalf("first subject shows %d, want the full limit 100", d.Layers[0].Limit.Limit)
	}
	if d := allow("key:second"); d.Layers[0].Limit.Limit != 50 || d.Layers[0].Remaining != 49 {
		t.Fatalf("second subject shows %d with %d left, want the share 50 with 49", d.Layers[0].Limit.Limit, d.Layers[0].Remaining)
	}
	s.Sync(ctx)
	for subject, want := range map[string]int64{"key:first": 99, "key:second": 100} {
		d, err := usStore.Peek(ctx, enforce.Request{Subject: subject, Limits: []enforce.Limit{l}})
		if err != nil {
			t.Fatal(err)
		}
		if d.Layers[0].Remaining != want {
			t.Errorf("us sees %s with %d left, want %d", subject, d.Layers[0].Remaining, want)
		}
	}
	if st := s.Status(); st.Overflow != 1 || st.Admitted != 2 || st.Peers[0].Published != 1 {
		t.Errorf("status %+v, want one overflow, 2 admitted, 1 published", st)
	}
}

// anonResolver gives every caller the one limit of a region test.
type anonResolver struct{ l enforce.Limit }

func (anonResolver) ResolveKey(string) (enforce.Caller, error) {
	return enforce.Caller{}, enforce.ErrInvalidKey
}

func (r anonResolver) Anonymous(netip.Addr) enforce.Caller {
	return enforce.Caller{Subject: "ip:client", Plan: "anonymous", Limits: []enforce.Limit{r.l}}
}

// TestSyncMarksShareDecidedResponses: while a peer is cut off, a sync
// region decides on its share, and the response says so
// (Sluice-RateLimit-Degraded: region-share) with the share's figures;
// linked, before and after, it carries no mark.
func TestSyncMarksShareDecidedResponses(t *testing.T) {
	weights := []region.Weight{{Name: "eu", Weight: 1}, {Name: "us", Weight: 1}}
	c := newCluster(t, region.Sync, weights)
	eu := c.regions[0]
	mw := httplimit.NewMiddleware(eu.store, anonResolver{limitFor(enforce.FixedWindow)}, httplimit.Options{Now: c.clock.now})
	mux := http.NewServeMux()
	mux.Handle("GET /api/items/{id}", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	get := func() http.Header {
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, httptest.NewRequest("GET", "/api/items/1", nil))
		if w.Code != http.StatusOK {
			t.Fatalf("status %d, want 200", w.Code)
		}
		return w.Header()
	}
	syncUntil := func(degraded bool) {
		for range 20 {
			c.sync()
			if eu.store.Status().Degraded == degraded {
				return
			}
		}
		t.Fatalf("eu degraded %v after 20 sync rounds, want %v", !degraded, degraded)
	}

	syncUntil(false)
	if h := get(); h.Get(httplimit.HeaderStoreDegraded) != "" || h.Get("X-RateLimit-Limit") != "100" {
		t.Errorf("linked: degraded %q, limit %q; want no mark and the whole limit, 100", h.Get(httplimit.HeaderStoreDegraded), h.Get("X-RateLimit-Limit"))
	}
	for _, p := range eu.proxies {
		p.cutOff()
	}
	syncUntil(true)
	if h := get(); h.Get(httplimit.HeaderStoreDegraded) != "region-share" || h.Get("X-RateLimit-Limit") != "50" {
		t.Errorf("cut off: degraded %q, limit %q; want region-share and eu's share, 50", h.Get(httplimit.HeaderStoreDegraded), h.Get("X-RateLimit-Limit"))
	}
	for _, p := range eu.proxies {
		p.restore()
	}
	syncUntil(false)
	if h := get(); h.Get(httplimit.HeaderStoreDegraded) != "" {
		t.Errorf("link back: degraded %q, want no mark", h.Get(httplimit.HeaderStoreDegraded))
	}
}
