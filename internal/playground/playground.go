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
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/plans"
)

// Bounds of one replay, so that a request to the playground can hold
// neither the portal's CPU nor its memory for long: its work (decisions),
// what it keeps (arrivals) and what it answers (runs, series points and
// limited subjects) are all capped.
const (
	// MaxArrivals bounds the arrivals of one replay.
	MaxArrivals = 1_000_000
	MaxTiers    = 10
	// MaxDecisions bounds a replay's work: each run (a tier under one
	// algorithm) decides every arrival on the tier's route once.
	MaxDecisions = 5_000_000
	// MaxSpan is the longest stretch of traffic replayed: the recorder's
	// retention.
	MaxSpan = 24 * time.Hour
	// MaxSeriesPoints bounds each run's series: over a longer span each
	// point covers several seconds (Report.Step).
	MaxSeriesPoints = 300
	// MaxSubjectLen bounds an arrival's subject, which runs list.
	MaxSubjectLen = 200
	// maxSubjectsShown caps the list of limited subjects per run.
	maxSubjectsShown = 20
)

// ErrInvalid is wrapped by every error about the scenario itself.
var ErrInvalid = errors.New("invalid playground scenario")

// InvalidError is a scenario refused for one field, named as a JSON path
// of the admin API's request ("arrivals", "tiers[1].limit").
type InvalidError struct {
	Field, Message string
}

func (e *InvalidError) Error() string {
	return ErrInvalid.Error() + ": " + e.Field + ": " + e.Message
}

// Unwrap makes errors.Is(err, ErrInvalid) true.
func (e *InvalidError) Unwrap() error { return ErrInvalid }

func invalid(field, format string, args ...any) error {
	return &InvalidError{Field: field, Message: fmt.Sprintf(format, args...)}
}

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
	// Seconds is the span of the arrivals, from Start.
	Seconds int `json:"seconds"`
	// Step is how many seconds each series point covers: 1 up to
	// MaxSeriesPoints seconds, more over longer spans, so that no series
	// has more than MaxSeriesPoints points.
	Step int   `json:"step_seconds"`
	Runs []Run `json:"runs"`
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
	// Series is admitted and rejected per Report.Step seconds from
	// Report.Start.
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

// Second is one point of a run's chart: Report.Step seconds (one second
// over short spans).
type Second struct {
	Admitted int `json:"admitted"`
	Rejected int `json:"rejected"`
}

// Replay runs the scenario. Each run has a fresh memory store whose clock
// is the arrival being decided, so windows, refills and leaks happen
// exactly as they would have at those instants.
func Replay(ctx context.Context, sc Scenario) (Report, error) {
	if len(sc.Arrivals) > MaxArrivals {
		return Report{}, invalid("arrivals", "%d arrivals, at most %d", len(sc.Arrivals), MaxArrivals)
	}
	if len(sc.Tiers) == 0 || len(sc.Tiers) > MaxTiers {
		return Report{}, invalid("tiers", "want 1 to %d tiers", MaxTiers)
	}
	algos := sc.Algorithms
	if len(algos) == 0 {
		algos = enforce.RateAlgorithms
	}
	for i, a := range algos {
		if !a.Valid() {
			return Report{}, invalid(fmt.Sprintf("algorithms[%d]", i), "unknown algorithm %q", a)
		}
		if a == enforce.Concurrency {
			return Report{}, errNoDurations(fmt.Sprintf("algorithms[%d]", i))
		}
	}
	for i, a := range sc.Arrivals {
		if len(a.Subject) > MaxSubjectLen {
			return Report{}, invalid(fmt.Sprintf("arrivals[%d].subject", i), "must be at most %d bytes", MaxSubjectLen)
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
			return Report{}, invalid("arrivals", "the arrivals span %s, at most %s", span, MaxSpan)
		}
		rep.Seconds = int(span/time.Second) + 1
	}
	rep.Step = max(1, (rep.Seconds+MaxSeriesPoints-1)/MaxSeriesPoints)
	// Each run decides the arrivals on its tier's route: the work is known
	// before any of it is done.
	decisions := 0
	given := make([]enforce.Limit, len(sc.Tiers))
	for i, t := range sc.Tiers {
		if fe := plans.ValidateLimit(fmt.Sprintf("tiers[%d].", i), t, []string{t.Route}); len(fe) > 0 {
			return Report{}, invalid(fe[0].Field, "%s", fe[0].Message)
		}
		given[i] = t.Enforce("playground")
		if given[i].Algorithm == enforce.Concurrency {
			return Report{}, errNoDurations(fmt.Sprintf("tiers[%d].algorithm", i))
		}
		on := len(arrivals)
		if t.Route != "" {
			on = 0
			for _, a := range arrivals {
				if a.Route == t.Route {
					on++
				}
			}
		}
		decisions += on * len(orderFirst(algos, given[i].Algorithm))
	}
	if decisions > MaxDecisions {
		return Report{}, invalid("arrivals", "replaying %d arrivals under %d tiers and their algorithms takes %d decisions, at most %d: "+
			"replay fewer arrivals (a shorter span, fewer subjects), fewer tiers or fewer algorithms",
			len(arrivals), len(sc.Tiers), decisions, MaxDecisions)
	}
	for i, t := range sc.Tiers {
		for _, a := range orderFirst(algos, given[i].Algorithm) {
			if err := ctx.Err(); err != nil {
				return Report{}, err
			}
			l := given[i]
			l.Algorithm = a
			if a != enforce.LeakyBucket && l.Mode == enforce.ModeQueue {
				l.Mode = enforce.ModeReject
			}
			run, err := replayOne(ctx, l, arrivals, rep, sc.KeepDecisions)
			if err != nil {
				return Report{}, err
			}
			run.Tier = t.Name
			run.AsGiven = a == given[i].Algorithm
			rep.Runs = append(rep.Runs, run)
		}
	}
	return rep, nil
}

// errNoDurations refuses a concurrency tier: arrivals are instants, and
// what is in flight depends on how long each request took.
func errNoDurations(field string) error {
	return invalid(field, "a concurrency tier cannot be replayed: arrivals carry no request durations, which decide what is in flight")
}

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
	store := memstore.New(memstore.Options{Now: func() time.Time { return now }, DisableUsage: true})
	limits := []enforce.Limit{l}
	run := Run{Algorithm: l.Algorithm, Limit: l.Limit, Window: int64(l.Window / time.Second), Burst: l.Burst,
		Series: make([]Second, (rep.Seconds+rep.Step-1)/rep.Step)}
	bySubject := map[string]*SubjectCount{}
	for _, a := range arrivals {
		if l.Route != "" && a.Route != l.Route {
			continue
		}
		now = a.At
		d, err := store.Allow(ctx, enforce.Request{Subject: a.Subject, Route: a.Route, Limits: limits})
		if err != nil {
			return Run{}, invalid("arrivals", "subject %q: %s", a.Subject, err)
		}
		sec := &run.Series[int(a.At.Sub(rep.Start)/time.Second)/rep.Step]
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
