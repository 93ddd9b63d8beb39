package playground_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/httplimit"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/playground"
)

var epoch = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func runOf(t *testing.T, rep playground.Report, algo enforce.Algorithm) playground.Run {
	t.Helper()
	i := slices.IndexFunc(rep.Runs, func(r playground.Run) bool { return r.Algorithm == algo })
	if i < 0 {
		t.Fatalf("no run for %s", algo)
	}
	return rep.Runs[i]
}

func TestSeedTokenBucketPreset(t *testing.T) {
	p, ok := playground.PresetBySlug("token-bucket-seed")
	if !ok {
		t.Fatal("preset missing")
	}
	sc := p.Scenario(epoch)
	sc.KeepDecisions = true
	rep, err := playground.Replay(context.Background(), sc)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Runs) != len(enforce.RateAlgorithms) {
		t.Fatalf("%d runs, want one per algorithm", len(rep.Runs))
	}
	run := rep.Runs[0]
	if run.Algorithm != enforce.TokenBucket || !run.AsGiven {
		t.Fatalf("first run is %s (as given %v), want the tier's own token_bucket", run.Algorithm, run.AsGiven)
	}
	want := []bool{true, true, true, true, true, true, true, true, true, true, false, true}
	if !slices.Equal(run.Decisions, want) || !slices.Equal(p.Want, want) {
		t.Fatalf("decisions %v, want %v (10 admitted, the 11th rejected, one more 0.5 s later)", run.Decisions, want)
	}
	if run.Admitted != 11 || run.Rejected != 1 || run.LimitedSubjects != 1 || run.Limited[0] != (playground.SubjectCount{Subject: "key:demo", Rejected: 1, Admitted: 11}) {
		t.Errorf("counts: %+v", run)
	}
	if len(run.Series) != 1 || run.Series[0] != (playground.Second{Admitted: 11, Rejected: 1}) {
		t.Errorf("series %+v", run.Series)
	}
}

func TestOtherPresets(t *testing.T) {
	cases := []struct {
		preset string
		want   map[enforce.Algorithm][2]int // admitted, rejected
	}{
		// The boundary burst: 20 in two seconds pass a fixed window of 10
		// per minute; the sliding log holds them to 10.
		{"fixed-window-boundary", map[enforce.Algorithm][2]int{enforce.FixedWindow: {20, 0}, enforce.SlidingWindowLog: {10, 10}}},
		// 3/s for 60 s against 120 per minute: the log admits the first
		// 120 and rejects the rest of the minute; the token bucket starts
		// with 120 tokens and loses one per second net, so admits all.
		{"steady", map[enforce.Algorithm][2]int{enforce.SlidingWindowLog: {120, 60}, enforce.TokenBucket: {180, 0}}},
		// Three callers, 12 bursts of 20 over 110 s, bucket of 15 refilled
		// at 0.5/s: 15 at first, then 5 per burst (10 s refill): 15+11*5.
		{"bursts", map[enforce.Algorithm][2]int{enforce.TokenBucket: {3 * (15 + 11*5), 3 * (240 - 70)}}},
	}
	for _, c := range cases {
		t.Run(c.preset, func(t *testing.T) {
			p, ok := playground.PresetBySlug(c.preset)
			if !ok {
				t.Fatal("preset missing")
			}
			rep, err := playground.Replay(context.Background(), p.Scenario(epoch))
			if err != nil {
				t.Fatal(err)
			}
			for algo, w := range c.want {
				r := runOf(t, rep, algo)
				if r.Admitted != w[0] || r.Rejected != w[1] {
					t.Errorf("%s: admitted %d rejected %d, want %d and %d", algo, r.Admitted, r.Rejected, w[0], w[1])
				}
				sum := 0
				for _, s := range r.Series {
					sum += s.Admitted + s.Rejected
				}
				if sum != r.Admitted+r.Rejected {
					t.Errorf("%s: the series holds %d requests, the counts %d", algo, sum, r.Admitted+r.Rejected)
				}
			}
		})
	}
}

// fixedResolver gives every caller the limits of one tier, keyed by the
// X-Subject header (the test's stand-in for a key).
type fixedResolver struct{ limits []enforce.Limit }

func (f fixedResolver) ResolveKey(secret string) (enforce.Caller, error) {
	return enforce.Caller{Subject: "key:" + secret, Plan: "playground", Limits: f.limits}, nil
}
func (f fixedResolver) Anonymous(ip netip.Addr) enforce.Caller {
	return enforce.Caller{Subject: "ip:" + ip.String(), Plan: "playground", Limits: f.limits}
}

// TestReplayMatchesLiveDecisions sends a random sequence through the real
// middleware on a memory store whose clock the test steps, notes each
// live answer, and checks that the playground decides every arrival the
// same way, for every algorithm.
func TestReplayMatchesLiveDecisions(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 14))
	const route = "GET /api/search"
	var arrivals []playground.Arrival
	at := epoch
	for range 3000 {
		at = at.Add(time.Duration(rng.IntN(400)) * time.Millisecond)
		arrivals = append(arrivals, playground.Arrival{At: at, Subject: fmt.Sprintf("key:k%d", rng.IntN(5)), Route: route})
	}
	for _, algo := range enforce.RateAlgorithms {
		t.Run(string(algo), func(t *testing.T) {
			tier := plans.LimitInput{Name: "search", Route: route, Algorithm: string(algo), Limit: 10, WindowSeconds: 5, Cost: 1, Mode: "reject"}
			if algo == enforce.TokenBucket || algo == enforce.LeakyBucket {
				tier.Burst = 4
			}
			var now time.Time
			store := memstore.New(memstore.Options{Now: func() time.Time { return now }})
			mw := httplimit.NewMiddleware(store, fixedResolver{limits: []enforce.Limit{tier.Enforce("live")}}, httplimit.Options{Now: func() time.Time { return now }})
			mux := http.NewServeMux()
			mux.Handle(route, mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
			var live []bool
			for _, a := range arrivals {
				now = a.At
				req := httptest.NewRequest("GET", "/api/search?q=x", nil)
				req.Header.Set("X-API-Key", a.Subject[len("key:"):])
				rec := httptest.NewRecorder()
				mux.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK && rec.Code != http.StatusTooManyRequests {
					t.Fatalf("live answer %d: %s", rec.Code, rec.Body)
				}
				live = append(live, rec.Code == http.StatusOK)
			}
			rep, err := playground.Replay(context.Background(), playground.Scenario{
				Arrivals: arrivals, Tiers: []plans.LimitInput{tier}, Algorithms: []enforce.Algorithm{algo}, KeepDecisions: true})
			if err != nil {
				t.Fatal(err)
			}
			got := rep.Runs[0].Decisions
			rejected := 0
			for i := range live {
				if got[i] != live[i] {
					t.Fatalf("arrival %d (%s at %s): replay %v, live %v", i, arrivals[i].Subject, arrivals[i].At.Sub(epoch), got[i], live[i])
				}
				if !live[i] {
					rejected++
				}
			}
			if rejected == 0 || rejected == len(live) {
				t.Fatalf("%d of %d rejected: the sequence does not exercise the limit", rejected, len(live))
			}
		})
	}
}

func TestInvalidScenario(t *testing.T) {
	_, err := playground.Replay(context.Background(), playground.Scenario{Tiers: []plans.LimitInput{{Name: "x", Algorithm: "magic", Limit: 1, WindowSeconds: 1}}})
	if err == nil {
		t.Fatal("an unknown algorithm was replayed")
	}
	_, err = playground.Replay(context.Background(), playground.Scenario{})
	if err == nil {
		t.Fatal("a scenario without tiers was replayed")
	}
	_, err = playground.Replay(context.Background(), playground.Scenario{Tiers: []plans.LimitInput{{Name: "x", Algorithm: "concurrency", Limit: 2}}})
	if !errors.Is(err, playground.ErrInvalid) || !strings.Contains(err.Error(), "durations") {
		t.Fatalf("a concurrency tier replayed from instants: %v, want ErrInvalid naming the missing durations", err)
	}
}
