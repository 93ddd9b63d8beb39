// Package playground replays traffic (recorded or synthetic) against limit
// tiers, every algorithm side by side, on the engine's own memory store
// driven by a replayed clock: what it reports is what enforcement would
// have decided for the same arrivals.
package playground

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/plans"
)

// Bounds of one replay, so that a request to the playground cannot hold
// the portal for long.
const (
	MaxArrivals = 2_000_000
	MaxTiers    = 10
	// MaxSpan is the longest stretch of traffic replayed: the recorder's
	// retention.
	MaxSpan = 24 * time.Hour
	// maxSubjectsShown caps the list of limited subjects per run.
	maxSubjectsShown = 20
)

// ErrInvalid is wrapped by every error about the scenario itself.
var ErrInvalid = errors.New("invalid playground scenario")

// Arrival is one request: when it arrived, who sent it, and the route it
// was for.
type Arrival struct {
	At      time.Time `json:"at"`
	Subject string    `json:"subject"`
	Route   string    `json:"route"`
}

// Scenario is what to replay.
type Scenario struct {
	// Arrivals in time order (Replay sorts a copy if they are not).
	Arrivals []Arrival
	// Tiers are replayed one by one; each applies to the arrivals on its
	// route ("" for all arrivals).
	Tiers []plans.LimitInput
	// Algorithms to compare; empty means all five. Each tier is replayed
	// once as given and once per other algorithm with the same limit,
	// window, burst and cost.
	Algorithms []enforce.Algorithm
	// KeepDecisions fills Run.Decisions (for tests and exports).
	KeepDecisions bool
}

// Report is a replay's outcome: one Run per tier and algorithm.
type Report struct {
	Start time.Time `json:"start"`
	// Seconds is the span of the series, from Start.
	Seconds int   `json:"seconds"`
	Runs    []Run `json:"runs"`
}

// Run is one tier under one algorithm.
type Run struct {
	Tier      string            `json:"tier"`
	Algorithm enforce.Algorithm `json:"algorithm"`
	// AsGiven is true for the tier's own algorithm, false for a
	// comparison.
	AsGiven  bool  `json:"as_given"`
	Limit    int64 `json:"limit"`
	Window   int64 `json:"window_seconds"`
	Burst    int64 `json:"burst"`
	Admitted int   `json:"admitted"`
	Rejected int   `json:"rejected"`
	// Queued counts admitted requests that a leaky bucket in queue mode
	// would have delayed.
	Queued int `json:"queued"`
	// Limited lists the subjects that had requests rejected, most
	// rejected first, at most 20; LimitedSubjects counts them all.
	Limited         []SubjectCount `json:"limited"`
	LimitedSubjects int            `json:"limited_subjects"`
	// Series is admitted and rejected per second from Report.Start.
	Series []Second `json:"series"`
	// Decisions holds, with Scenario.KeepDecisions, whether each arrival
	// on the tier's route was admitted, in arrival order.
	Decisions []bool `json:"-"`
}

// SubjectCount is how often one subject was limited.
type SubjectCount struct {
	Subject  string `json:"subject"`
	Rejected int    `json:"rejected"`
	Admitted int    `json:"admitted"`
}

// Second is one second of a run's chart.
type Second struct {
	Admitted int `json:"admitted"`
	Rejected int `json:"rejected"`
}

// Replay runs the scenario. Each run has a fresh memory store whose clock
// is the arrival being decided, so windows, refills and leaks happen
// exactly as they would have at those instants.
func Replay(ctx context.Context, sc Scenario) (Report, error) {
	if len(sc.Arrivals) > MaxArrivals {
		return Report{}, fmt.Errorf("%w: %d arrivals, at most %d", ErrInvalid, len(sc.Arrivals), MaxArrivals)
	}
	if len(sc.Tiers) == 0 || len(sc.Tiers) > MaxTiers {
		return Report{}, fmt.Errorf("%w: tiers: want 1 to %d", ErrInvalid, MaxTiers)
	}
	algos := sc.Algorithms
	if len(algos) == 0 {
		algos = enforce.RateAlgorithms
	}
	for _, a := range algos {
		if !a.Valid() {
			return Report{}, fmt.Errorf("%w: unknown algorithm %q", ErrInvalid, a)
		}
		if a == enforce.Concurrency {
			return Report{}, errNoDurations
		}
	}
	arrivals := sc.Arrivals
	if !slices.IsSortedFunc(arrivals, byTime) {
		arrivals = slices.Clone(arrivals)
		slices.SortStableFunc(arrivals, byTime)
	}
	var rep Report
	if len(arrivals) > 0 {
		rep.Start = arrivals[0].At.Truncate(time.Second)
		span := arrivals[len(arrivals)-1].At.Sub(rep.Start)
		if span > MaxSpan {
			return Report{}, fmt.Errorf("%w: the arrivals span %s, at most %s", ErrInvalid, span, MaxSpan)
		}
		rep.Seconds = int(span/time.Second) + 1
	}
	for i, t := range sc.Tiers {
		if fe := plans.ValidateLimit(fmt.Sprintf("tiers[%d].", i), t, []string{t.Route}); len(fe) > 0 {
			return Report{}, fmt.Errorf("%w: %s: %s", ErrInvalid, fe[0].Field, fe[0].Message)
		}
		given := t.Enforce("playground")
		if given.Algorithm == enforce.Concurrency {
			return Report{}, errNoDurations
		}
		for _, a := range orderFirst(algos, given.Algorithm) {
			if err := ctx.Err(); err != nil {
				return Report{}, err
			}
			l := given
			l.Algorithm = a
			if a != enforce.LeakyBucket && l.Mode == enforce.ModeQueue {
				l.Mode = enforce.ModeReject
			}
			run, err := replayOne(ctx, l, arrivals, rep, sc.KeepDecisions)
			if err != nil {
				return Report{}, err
			}
			run.Tier = t.Name
			run.AsGiven = a == given.Algorithm
			rep.Runs = append(rep.Runs, run)
		}
	}
	return rep, nil
}

// errNoDurations refuses a concurrency tier: arrivals are instants, and
// what is in flight depends on how long each request took.
var errNoDurations = fmt.Errorf("%w: a concurrency tier cannot be replayed: arrivals carry no request durations, which decide what is in flight", ErrInvalid)

func byTime(a, b Arrival) int { return a.At.Compare(b.At) }

// orderFirst puts the tier's own algorithm first, so it heads its group
// (and is shown, as the reference, even when not asked for).
func orderFirst(algos []enforce.Algorithm, first enforce.Algorithm) []enforce.Algorithm {
	out := []enforce.Algorithm{first}
	for _, a := range algos {
		if a != first {
			out = append(out, a)
		}
	}
	return out
}

func replayOne(ctx context.Context, l enforce.Limit, arrivals []Arrival, rep Report, keep bool) (Run, error) {
	var now time.Time
	store := enforce.NewMemoryStore(enforce.MemoryOptions{Now: func() time.Time { return now }, DisableUsage: true})
	limits := []enforce.Limit{l}
	run := Run{Algorithm: l.Algorithm, Limit: l.Limit, Window: int64(l.Window / time.Second), Burst: l.Burst,
		Series: make([]Second, rep.Seconds)}
	bySubject := map[string]*SubjectCount{}
	for _, a := range arrivals {
		if l.Route != "" && a.Route != l.Route {
			continue
		}
		now = a.At
		d, err := store.Allow(ctx, enforce.Request{Subject: a.Subject, Route: a.Route, Limits: limits})
		if err != nil {
			return Run{}, fmt.Errorf("%w: subject %q: %w", ErrInvalid, a.Subject, err)
		}
		sec := &run.Series[int(a.At.Sub(rep.Start)/time.Second)]
		sc := bySubject[a.Subject]
		if sc == nil {
			sc = &SubjectCount{Subject: a.Subject}
			bySubject[a.Subject] = sc
		}
		if d.Allowed {
			run.Admitted++
			sec.Admitted++
			sc.Admitted++
			if d.Delay > 0 {
				run.Queued++
			}
		} else {
			run.Rejected++
			sec.Rejected++
			sc.Rejected++
		}
		if keep {
			run.Decisions = append(run.Decisions, d.Allowed)
		}
	}
	for _, sc := range bySubject {
		if sc.Rejected > 0 {
			run.Limited = append(run.Limited, *sc)
		}
	}
	run.LimitedSubjects = len(run.Limited)
	slices.SortFunc(run.Limited, func(a, b SubjectCount) int {
		if a.Rejected != b.Rejected {
			return b.Rejected - a.Rejected
		}
		return strings.Compare(a.Subject, b.Subject)
	})
	if len(run.Limited) > maxSubjectsShown {
		run.Limited = run.Limited[:maxSubjectsShown]
	}
	return run, nil
}
