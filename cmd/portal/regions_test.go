package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/enforce/redisstore"
	"github.com/sluicehq/sluice/internal/region"
	"github.com/sluicehq/sluice/internal/testenv"
)

func TestLoadConfigRegions(t *testing.T) {
	t.Run("DefaultIsOneSharedRedis", func(t *testing.T) {
		cfg, _, err := LoadConfig(nil, envOf(nil), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Region.Mode != region.Shared || cfg.Region.Region != "" || cfg.Region.Interval != time.Second || len(cfg.PeerRedisURLs) != 0 {
			t.Fatalf("region defaults = %+v, peers %v", cfg.Region, cfg.PeerRedisURLs)
		}
	})
	t.Run("Sync", func(t *testing.T) {
		cfg, _, err := LoadConfig(nil, envOf(map[string]string{
			"REDIS_URL": "redis://eu:6379", "PORTAL_REGION": "eu", "PORTAL_REGIONS": "eu=2,us=1",
			"PORTAL_REGION_MODE": "sync", "PORTAL_PEER_REDIS_URLS": "us=redis://us:6379", "PORTAL_REGION_SYNC_INTERVAL": "250ms",
		}), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		r := cfg.Region
		if r.Mode != region.Sync || r.Region != "eu" || len(r.Regions) != 2 || r.Regions[0] != (region.Weight{Name: "eu", Weight: 2}) ||
			r.Interval != 250*time.Millisecond || len(cfg.PeerRedisURLs) != 1 || cfg.PeerRedisURLs[0] != (region.Peer{Name: "us", URL: "redis://us:6379"}) {
			t.Fatalf("region config = %+v, peers %v", r, cfg.PeerRedisURLs)
		}
	})
	base := map[string]string{"REDIS_URL": "redis://eu:6379", "PORTAL_REGION": "eu", "PORTAL_REGIONS": "eu,us", "PORTAL_REGION_MODE": "sync", "PORTAL_PEER_REDIS_URLS": "us=redis://u:hunter2@us:6379"}
	tests := []struct {
		name   string
		change map[string]string
		want   string
	}{
		{"UnknownMode", map[string]string{"PORTAL_REGION_MODE": "async"}, `invalid PORTAL_REGION_MODE (-region-mode) "async": unknown mode; want shared`},
		{"BadWeight", map[string]string{"PORTAL_REGIONS": "eu=0,us"}, `invalid PORTAL_REGIONS (-regions) "eu=0,us": invalid region list: region "eu": weight "0" is not a whole number`},
		{"BadRegionName", map[string]string{"PORTAL_REGION": "eu west"}, `invalid PORTAL_REGION (-region) "eu west": not a region name`},
		{"RegionNotListed", map[string]string{"PORTAL_REGION": "ap"}, `invalid PORTAL_REGION (-region): region "ap" is not in the region list`},
		{"NoRegion", map[string]string{"PORTAL_REGION": ""}, `invalid PORTAL_REGION (-region) "": mode sync needs this instance's region name`},
		{"NoRegions", map[string]string{"PORTAL_REGIONS": ""}, `invalid PORTAL_REGIONS (-regions) "": mode sync needs every region`},
		{"NoRedis", map[string]string{"REDIS_URL": ""}, `invalid PORTAL_REGION_MODE (-region-mode) "sync": needs REDIS_URL`},
		{"MissingPeer", map[string]string{"PORTAL_PEER_REDIS_URLS": ""}, `invalid PORTAL_PEER_REDIS_URLS (-peer-redis-urls): sync needs the Redis URL of region "us"`},
		{"UnknownPeer", map[string]string{"PORTAL_PEER_REDIS_URLS": "us=redis://us:6379,ap=redis://ap:6379"}, `invalid PORTAL_PEER_REDIS_URLS (-peer-redis-urls): peer "ap" is not in the region list`},
		{"BadPeerURL", map[string]string{"PORTAL_PEER_REDIS_URLS": "us=http://u:hunter2@us"}, `invalid PORTAL_PEER_REDIS_URLS (-peer-redis-urls) (value hidden): region us: scheme "http" is not redis`},
		{"NotAPeerList", map[string]string{"PORTAL_PEER_REDIS_URLS": "redis://u:hunter2@us"}, `invalid PORTAL_PEER_REDIS_URLS (-peer-redis-urls) (value hidden): not a list of region=URL`},
		{"PeersInSharedMode", map[string]string{"PORTAL_REGION_MODE": "shared"}, `invalid PORTAL_PEER_REDIS_URLS (-peer-redis-urls): shared mode has no peers`},
		{"IntervalTooShort", map[string]string{"PORTAL_REGION_SYNC_INTERVAL": "1ms"}, `invalid PORTAL_REGION_SYNC_INTERVAL (-region-sync-interval) "1ms": out of range; want a duration from 10ms to 1m`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := map[string]string{}
			for k, v := range base {
				env[k] = v
			}
			for k, v := range tt.change {
				env[k] = v
			}
			_, _, err := LoadConfig(nil, envOf(env), io.Discard)
			if err == nil {
				t.Fatal("accepted")
			}
			msg := err.Error()
			if !strings.Contains(msg, tt.want) {
				t.Errorf("error %q\nwant it to contain %q", msg, tt.want)
			}
			if strings.Contains(msg, "\n") || strings.Contains(msg, "hunter2") {
				t.Errorf("error is not one line without secrets: %q", msg)
			}
		})
	}
}

// TestReadyzNamesAnUnreachablePeerRegion runs a sync region whose peer's
// Redis does not answer: /readyz still answers 200, "degraded", naming the
// peer, since the region keeps enforcing its share.
func TestReadyzNamesAnUnreachablePeerRegion(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Postgres(t)
	local, prefix := testenv.Redis(t)
	localStore, err := redisstore.New(local, redisstore.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer localStore.Close()
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer dead.Close()
	deadStore, err := redisstore.New(dead, redisstore.Options{Prefix: prefix, Timeout: 300 * time.Millisecond, DisableUsage: true})
	if err != nil {
		t.Fatal(err)
	}
	defer deadStore.Close()
	rs, err := region.New(localStore, region.Config{Region: "eu", Regions: []region.Weight{{Name: "eu", Weight: 1}, {Name: "us", Weight: 1}}, Mode: region.Sync},
		[]region.PeerStore{{Name: "us", Charger: deadStore, Ping: func(ctx context.Context) error { return dead.Ping(ctx).Err() }}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	serve := func() (int, readiness) {
		rec := &recorder{header: http.Header{}}
		req, _ := http.NewRequestWithContext(ctx, "GET", "/readyz", nil)
		readyzRegions(pool, local, rs.Status, discardLogger()).ServeHTTP(rec, req)
		var got readiness
		if err := json.Unmarshal([]byte(rec.body.String()), &got); err != nil {
			t.Fatalf("body %q: %v", rec.body.String(), err)
		}
		return rec.status, got
	}
	if status, got := serve(); status != 200 || got.Status != "ok" || got.Checks["region:us"] != "ok" {
		t.Fatalf("before any sync round: %d %+v, want 200 ok with region:us ok", status, got)
	}
	rs.Sync(ctx)
	status, got := serve()
	if status != 200 || got.Status != "degraded" || len(got.Degraded) != 1 || got.Degraded[0] != "region:us" ||
		got.Checks["region:us"] != "unreachable" || len(got.Failing) != 0 {
		t.Fatalf("peer down: %d %+v, want 200 degraded naming region:us, nothing failing", status, got)
	}
}

// TestRunTwoRegionsInSync runs two portals, eu and us, each with its own
// Postgres database and its own redis-server, in sync mode: an anonymous
// client's requests in eu reach us's counts; with us's Redis gone, eu says
// degraded on /readyz and holds to its share (5 of the search tier's 10);
// when us's Redis answers again, eu counts published consumption again.
func TestRunTwoRegionsInSync(t *testing.T) {
	euRedis, usRedis := testenv.StartPrivateRedis(t), testenv.StartPrivateRedis(t)
	regionEnv := func(name, peer string, own, peerRedis *testenv.PrivateRedis) map[string]string {
		env := baseEnv(t)
		env["DATABASE_URL"] = testenv.PostgresURL(t)
		env["REDIS_URL"] = own.URL()
		env["PORTAL_REGION"] = name
		env["PORTAL_REGIONS"] = name + "," + peer
		env["PORTAL_REGION_MODE"] = "sync"
		env["PORTAL_REGION_SYNC_INTERVAL"] = "50ms"
		env["PORTAL_PEER_REDIS_URLS"] = peer + "=" + peerRedis.URL()
		return env
	}
	eu := startPortal(t, regionEnv("eu", "us", euRedis, usRedis))
	us := startPortal(t, regionEnv("us", "eu", usRedis, euRedis))

	// searchLeft is the anonymous search tier's remaining as a region's
	// /api/rate-limit-status reports it (it consumes nothing).
	searchLeft := func(p *portal) int64 {
		t.Helper()
		status, body := get(t, p.url+"/api/rate-limit-status")
		if status != 200 {
			t.Fatalf("rate-limit-status: %d %s", status, body)
		}
		var st struct {
			Limits []struct {
				Policy    string `json:"policy"`
				Remaining int64  `json:"remaining"`
			} `json:"limits"`
		}
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			t.Fatalf("rate-limit-status %q: %v", body, err)
		}
		for _, l := range st.Limits {
			if l.Policy == "anonymous-search" {
				return l.Remaining
			}
		}
		t.Fatalf("no anonymous-search limit in %s", body)
		return 0
	}
	// eventually polls cond until it holds: a sync round's arrival or a
	// peer's state is an event this test can only observe.
	eventually := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 30s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	search := func(p *portal) *http.Response {
		t.Helper()
		resp, err := http.Get(p.url + "/api/search?q=x")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}

	for range 4 {
		if resp := search(eu); resp.StatusCode != 200 {
			t.Fatalf("eu search: %d", resp.StatusCode)
		}
	}
	euLeft := searchLeft(eu)
	if euLeft > 6 {
		t.Fatalf("eu shows %d left after 4 searches of 10", euLeft)
	}
	eventually("us counts eu's searches", func() bool { return searchLeft(us) == searchLeft(eu) })

	usRedis.Stop()
	eventually("eu names us as unreachable on /readyz", func() bool {
		status, body := get(t, eu.url+"/readyz")
		return status == 200 && strings.Contains(body, `"status":"degraded"`) && strings.Contains(body, `"region:us"`)
	})
	resp := search(eu)
	if policy := resp.Header.Get("RateLimit-Policy"); !strings.Contains(policy, `"anonymous-search";q=5;w=60`) {
		t.Errorf("eu cut off from us answers with policy %q, want its share q=5 of the search tier", policy)
	}
	left, _ := strconv.ParseInt(resp.Header.Get("X-RateLimit-Remaining"), 10, 64)
	if resp.StatusCode != 200 || left > 4 {
		t.Errorf("eu cut off: %d with %d left, want 200 and at most 4 of its share 5 left", resp.StatusCode, left)
	}

	usRedis.Restart(t)
	eventually("eu counts on the full limit again", func() bool {
		status, body := get(t, eu.url+"/readyz")
		if status != 200 || !strings.Contains(body, `"status":"ok"`) {
			return false
		}
		policy := search(eu).Header.Get("RateLimit-Policy")
		return strings.Contains(policy, `"anonymous-search";q=10;w=60`)
	})
}
