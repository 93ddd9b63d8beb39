package traffic_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/httplimit"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/playground"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/traffic"
)

type sinkCase struct {
	name string
	make func(t *testing.T) traffic.Sink
}

var sinks = []sinkCase{
	{"Redis", func(t *testing.T) traffic.Sink {
		testenv.RealRedis(t, "BITFIELD") // the sink's per-second counters
		rdb, prefix := testenv.Redis(t)
		return traffic.NewRedisSink(rdb, prefix)
	}},
	{"Memory", func(t *testing.T) traffic.Sink { return traffic.NewMemorySink() }},
}

type keyResolver struct{ limits []enforce.Limit }

func (k keyResolver) ResolveKey(secret string) (enforce.Caller, error) {
	return enforce.Caller{Subject: "key:" + secret, Plan: "p", Limits: k.limits}, nil
}
func (k keyResolver) Anonymous(ip netip.Addr) enforce.Caller {
	return enforce.Caller{Subject: "ip:" + ip.String(), Plan: "p", Limits: k.limits}
}

// TestReplayOfRecordedTrafficMatchesLive sends traffic through the real
// middleware, recording it; then the playground replays what was recorded
// with the same tier and must decide every request as the live store did.
// Live requests arrive on whole seconds, the recording's resolution.
func TestReplayOfRecordedTrafficMatchesLive(t *testing.T) {
	for _, sc := range sinks {
		t.Run(sc.name, func(t *testing.T) {
			const route = "GET /api/items/{id}"
			tier := plans.LimitInput{Name: "items", Route: route, Algorithm: "token_bucket", Limit: 6, WindowSeconds: 3, Burst: 5, Cost: 1, Mode: "reject"}
			rec := traffic.NewRecorder(sc.make(t), traffic.Options{})
			var now time.Time
			store := memstore.New(memstore.Options{Now: func() time.Time { return now }})
			mw := httplimit.NewMiddleware(traffic.Wrap(store, rec), keyResolver{[]enforce.Limit{tier.Enforce("live")}}, httplimit.Options{})
			mux := http.NewServeMux()
			mux.Handle(route, mw.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))

			rng := rand.New(rand.NewPCG(1, 2))
			start := time.Now().Add(-time.Hour).Truncate(time.Hour).Add(59 * time.Minute) // crosses an hour
			live := map[string][]bool{}
			for sec := range 150 {
				now = start.Add(time.Duration(sec) * time.Second)
				for range rng.IntN(8) {
					key := fmt.Sprintf("k%d", rng.IntN(4))
					req := httptest.NewRequest("GET", "/api/items/7", nil)
					req.Header.Set("X-API-Key", key)
					w := httptest.NewRecorder()
					mux.ServeHTTP(w, req)
					live["key:"+key] = append(live["key:"+key], w.Code == http.StatusOK)
				}
				if sec%20 == 0 {
					rec.Flush(context.Background()) // several flushes, as in production
				}
			}
			rec.Flush(context.Background())
			got, err := rec.Load(context.Background(), route, start)
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Subjects) != 4 {
				t.Fatalf("recorded subjects %v, want the 4 keys", got.Subjects)
			}
			arrivals := got.Arrivals()
			rep, err := playground.Replay(context.Background(), playground.Scenario{
				Arrivals: arrivals, Tiers: []plans.LimitInput{tier}, Algorithms: []enforce.Algorithm{enforce.TokenBucket}, KeepDecisions: true})
			if err != nil {
				t.Fatal(err)
			}
			replayed := map[string][]bool{}
			for i, a := range arrivals {
				replayed[a.Subject] = append(replayed[a.Subject], rep.Runs[0].Decisions[i])
			}
			rejected := 0
			for subject, want := range live {
				if fmt.Sprint(replayed[subject]) != fmt.Sprint(want) {
					t.Fatalf("%s: replay %v\nlive %v", subject, replayed[subject], want)
				}
				for _, ok := range want {
					if !ok {
						rejected++
					}
				}
			}
			if rejected == 0 {
				t.Fatal("no request was rejected: the test does not exercise the limit")
			}
		})
	}
}

// TestRecordingIsBounded: the busiest subjects are kept in full, one in
// SampleEvery of the others up to MaxSampled, and the rest counted.
func TestRecordingIsBounded(t *testing.T) {
	for _, sc := range sinks {
		t.Run(sc.name, func(t *testing.T) {
			rec := traffic.NewRecorder(sc.make(t), traffic.Options{Full: 2, SampleEvery: 3, MaxSampled: 4})
			at := time.Now().Add(-time.Minute).Truncate(time.Second)
			total := 0
			// Two heavy subjects, then 60 light ones.
			for range 50 {
				rec.Record("GET /x", "key:heavy1", at)
				rec.Record("GET /x", "key:heavy2", at)
				total += 2
			}
			for i := range 60 {
				rec.Record("GET /x", fmt.Sprintf("ip:10.0.0.%d", i), at.Add(time.Second))
				total++
			}
			rec.Flush(context.Background())
			got, err := rec.Load(context.Background(), "GET /x", at.Add(-time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			full, sampled, kept := 0, 0, 0
			for s, kind := range got.Subjects {
				switch kind {
				case traffic.KindFull:
					full++
					if s != "key:heavy1" && s != "key:heavy2" {
						t.Errorf("%s kept in full, not one of the busiest", s)
					}
				case traffic.KindSampled:
					sampled++
				}
				for _, n := range got.Series[s] {
					kept += n
				}
			}
			if full != 2 || sampled < 1 || sampled > 4 {
				t.Errorf("%d full, %d sampled; want 2 and 1..4", full, sampled)
			}
			if kept+got.Unrecorded != total || got.SampleEvery != 3 {
				t.Errorf("kept %d + unrecorded %d != %d arrivals (sample every %d)", kept, got.Unrecorded, total, got.SampleEvery)
			}
			routes, err := rec.Routes(context.Background())
			if err != nil || len(routes) != 1 || routes[0] != "GET /x" {
				t.Errorf("routes %v %v", routes, err)
			}
		})
	}
}

// TestRecordNeverBlocks: with nothing draining the stripes, Record returns
// at once and counts what it drops: of 100 distinct arrivals, at most
// Buffer are kept, and every other one is counted dropped.
func TestRecordNeverBlocks(t *testing.T) {
	rec := traffic.NewRecorder(traffic.NewMemorySink(), traffic.Options{Buffer: 4})
	at := time.Now().Add(-time.Minute).Truncate(time.Second)
	for i := range 100 {
		rec.Record("GET /x", fmt.Sprintf("key:%d", i), at)
	}
	rec.Flush(context.Background())
	if rec.Dropped() < 96 {
		t.Fatalf("dropped %d, want at least 96 of 100 distinct arrivals with room for 4", rec.Dropped())
	}
	got, err := rec.Load(context.Background(), "GET /x", at.Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	kept := got.Unrecorded
	for _, series := range got.Series {
		for _, n := range series {
			kept += n
		}
	}
	if kept+int(rec.Dropped()) != 100 {
		t.Errorf("kept %d + dropped %d != 100 arrivals", kept, rec.Dropped())
	}
}

// TestRecordCountsOneSubjectsSecondTogether: the bound is on distinct
// arrivals, so one busy subject's requests within a second are all kept,
// however many there are.
func TestRecordCountsOneSubjectsSecondTogether(t *testing.T) {
	rec := traffic.NewRecorder(traffic.NewMemorySink(), traffic.Options{Buffer: 4})
	at := time.Now().Add(-time.Minute).Truncate(time.Second)
	for range 1000 {
		rec.Record("GET /x", "key:1", at)
	}
	rec.Flush(context.Background())
	got, err := rec.Load(context.Background(), "GET /x", at.Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if n := got.Series["key:1"][at.Unix()]; n != 1000 || rec.Dropped() != 0 {
		t.Errorf("recorded %d of 1000 arrivals, dropped %d", n, rec.Dropped())
	}
}
