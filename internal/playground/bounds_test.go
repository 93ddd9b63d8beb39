package playground_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/playground"
)

func tiers(n int, route string) []plans.LimitInput {
	out := make([]plans.LimitInput, n)
	for i := range out {
		out[i] = plans.LimitInput{Name: "t", Route: route, Algorithm: "fixed_window", Limit: 10, WindowSeconds: 60, Cost: 1, Mode: "reject"}
	}
	return out
}

// TestReplayWorkBounded: the decisions a replay would make (arrivals on
// each tier's route, times the algorithms compared) are counted before any
// is made; past MaxDecisions the scenario is refused naming the arrivals.
func TestReplayWorkBounded(t *testing.T) {
	arrivals := make([]playground.Arrival, 200_000)
	for i := range arrivals {
		arrivals[i] = playground.Arrival{At: epoch.Add(time.Duration(i) * time.Millisecond), Subject: "s", Route: "GET /a"}
	}
	// 200,000 arrivals x 10 tiers x 5 algorithms = 10,000,000 decisions.
	_, err := playground.Replay(context.Background(), playground.Scenario{Arrivals: arrivals, Tiers: tiers(10, "")})
	var ie *playground.InvalidError
	if !errors.As(err, &ie) || ie.Field != "arrivals" || !strings.Contains(ie.Message, "10000000 decisions, at most 5000000") || !errors.Is(err, playground.ErrInvalid) {
		t.Fatalf("Replay = %v, want arrivals refused for 10000000 decisions", err)
	}
	// Tiers on a route nobody arrived on cost nothing: the same arrivals
	// under one tier of theirs and nine of another route fit.
	sc := playground.Scenario{Arrivals: arrivals[:100_000], Tiers: append(tiers(1, "GET /a"), tiers(9, "GET /b")...)}
	rep, err := playground.Replay(context.Background(), sc)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Runs) != 50 || rep.Runs[0].Admitted+rep.Runs[0].Rejected != 100_000 || rep.Runs[5].Admitted+rep.Runs[5].Rejected != 0 {
		t.Fatalf("runs %d, first decided %d, sixth %d", len(rep.Runs), rep.Runs[0].Admitted+rep.Runs[0].Rejected, rep.Runs[5].Admitted+rep.Runs[5].Rejected)
	}
}

// TestSeriesDownsampled: over more than MaxSeriesPoints seconds, each point
// covers Step seconds and the points add up to the run's counts.
func TestSeriesDownsampled(t *testing.T) {
	var arrivals []playground.Arrival
	for s := range 1000 {
		for range s%3 + 1 {
			arrivals = append(arrivals, playground.Arrival{At: epoch.Add(time.Duration(s) * time.Second), Subject: "s"})
		}
	}
	rep, err := playground.Replay(context.Background(), playground.Scenario{Arrivals: arrivals, Tiers: tiers(1, "")})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Seconds != 1000 || rep.Step != 4 {
		t.Fatalf("seconds %d step %d, want 1000 and 4", rep.Seconds, rep.Step)
	}
	for _, run := range rep.Runs {
		admitted, rejected := 0, 0
		for _, p := range run.Series {
			admitted += p.Admitted
			rejected += p.Rejected
		}
		if len(run.Series) != 250 || admitted != run.Admitted || rejected != run.Rejected || admitted+rejected != len(arrivals) {
			t.Errorf("%s: %d points adding to %d/%d, run %d/%d of %d", run.Algorithm, len(run.Series), admitted, rejected, run.Admitted, run.Rejected, len(arrivals))
		}
	}
	// Up to MaxSeriesPoints seconds, one point per second.
	rep, err = playground.Replay(context.Background(), playground.Scenario{Arrivals: arrivals[:600], Tiers: tiers(1, "")})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Step != 1 || len(rep.Runs[0].Series) != rep.Seconds || rep.Seconds > playground.MaxSeriesPoints {
		t.Errorf("short span: step %d, %d points over %d s", rep.Step, len(rep.Runs[0].Series), rep.Seconds)
	}
}

func TestInvalidFieldsNamed(t *testing.T) {
	one := []playground.Arrival{{At: epoch, Subject: "s"}}
	for _, tc := range []struct {
		name  string
		sc    playground.Scenario
		field string
	}{
		{"NoTiers", playground.Scenario{Arrivals: one}, "tiers"},
		{"TooManyTiers", playground.Scenario{Arrivals: one, Tiers: tiers(11, "")}, "tiers"},
		{"BadLimit", playground.Scenario{Arrivals: one, Tiers: []plans.LimitInput{{Name: "t", Algorithm: "fixed_window", Limit: -1, WindowSeconds: 60}}}, "tiers[0].limit"},
		{"UnknownAlgorithm", playground.Scenario{Arrivals: one, Tiers: tiers(1, ""), Algorithms: []enforce.Algorithm{"token_bucket", "magic"}}, "algorithms[1]"},
		{"ConcurrencyTier", playground.Scenario{Arrivals: one, Tiers: []plans.LimitInput{{Name: "t", Algorithm: "concurrency", Limit: 2}}}, "tiers[0].algorithm"},
		{"LongSubject", playground.Scenario{Arrivals: []playground.Arrival{{At: epoch, Subject: "s"}, {At: epoch, Subject: strings.Repeat("x", 201)}}, Tiers: tiers(1, "")}, "arrivals[1].subject"},
		{"SpanTooLong", playground.Scenario{Arrivals: []playground.Arrival{{At: epoch, Subject: "s"}, {At: epoch.Add(25 * time.Hour), Subject: "s"}}, Tiers: tiers(1, "")}, "arrivals"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := playground.Replay(context.Background(), tc.sc)
			var ie *playground.InvalidError
			if !errors.As(err, &ie) || ie.Field != tc.field {
				t.Fatalf("Replay = %v, want an error on %s", err, tc.field)
			}
		})
	}
}
