// Package traffic records the arrivals of the protected API, per route and
// subject at one-second resolution, for the last 24 hours, so that the
// playground can replay real traffic against other tiers. Recording is
// bounded: per route and hour, the busiest subjects (Options.Full) are kept
// in full and the others sampled (one subject in Options.SampleEvery, each
// chosen subject's series complete, at most Options.MaxSampled of them);
// the arrivals of subjects neither kept nor sampled are counted, so the
// sampling can be stated. The request path only counts its arrival in one
// of a few striped tables, never waiting for the aggregator: when its
// stripe holds as many distinct arrivals as it may, a new one is dropped
// and counted.
package traffic

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/playground"
)

// Retention is how long arrivals are kept.
const Retention = 24 * time.Hour

// Options bound the recording; zero fields take the defaults.
type Options struct {
	// Full is how many of each route's busiest subjects per hour are kept
	// in full (default 20).
	Full int
	// SampleEvery keeps one other subject in SampleEvery (default 10).
	SampleEvery int
	// MaxSampled caps the sampled subjects per route and hour (default 50).
	MaxSampled int
	// MaxRoutes caps the routes recorded (default 200).
	MaxRoutes int
	// Buffer bounds the distinct arrivals (route, subject, second) the
	// request path holds between two drains (default 16384); arrivals of
	// one subject in one second are counted together, whatever their
	// number.
	Buffer int
	// FlushEvery is how often aggregated counts are written (default 1s).
	FlushEvery time.Duration
	Logger     *slog.Logger
	// Now is the clock Load measures retention by (default time.Now).
	Now func() time.Time
}

func (o *Options) defaults() {
	if o.Full <= 0 {
		o.Full = 20
	}
	if o.SampleEvery <= 0 {
		o.SampleEvery = 10
	}
	if o.MaxSampled <= 0 {
		o.MaxSampled = 50
	}
	if o.MaxRoutes <= 0 {
		o.MaxRoutes = 200
	}
	if o.Buffer <= 0 {
		o.Buffer = 16384
	}
	if o.FlushEvery <= 0 {
		o.FlushEvery = time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Kind says how a subject's arrivals were kept in one hour.
type Kind string

// The two ways a subject is kept.
const (
	KindFull    Kind = "full"
	KindSampled Kind = "sampled"
)

// Counts are one flush's arrivals to store: per route, hour and subject,
// the count of each second of that hour.
type Counts struct {
	Route   string
	Hour    int64 // unix seconds / 3600
	Subject string
	Kind    Kind
	// Seconds maps a second of the hour (0..3599) to its arrivals.
	Seconds map[int]int
}

// Sink stores counts and reads them back; RedisSink and MemorySink are
// the two implementations.
type Sink interface {
	Add(ctx context.Context, batch []Counts, unrecorded map[RouteHour]int) error
	Load(ctx context.Context, route string, fromHour, toHour int64) (Recorded, error)
	Routes(ctx context.Context) ([]string, error)
}

// RouteHour names one route's hour.
type RouteHour struct {
	Route string
	Hour  int64
}

// Recorded is a route's stored arrivals.
type Recorded struct {
	Route string `json:"route"`
	// Subjects says how each subject was kept.
	Subjects map[string]Kind `json:"subjects"`
	// Series holds each subject's arrivals per unix second.
	Series map[string]map[int64]int `json:"-"`
	// Unrecorded counts the arrivals of subjects neither kept nor sampled.
	Unrecorded  int `json:"unrecorded"`
	SampleEvery int `json:"sample_every"`
}

type event struct {
	route, subject string
	sec            int64
}

// Recorder aggregates arrivals and writes them to a Sink. Record is safe
// for concurrent use and never waits for the aggregator.
type Recorder struct {
	sink    Sink
	opts    Options
	dropped atomic.Int64
	seed    maphash.Seed

	// stripes count the request path's arrivals until Run drains them;
	// each stripe holds at most stripeCap distinct arrivals.
	stripes   []stripe
	stripeCap int
	// drainMu serialises drains (Run's and Flush's), which swap the
	// stripes' spare tables.
	drainMu sync.Mutex

	// mu guards hours, the choice of kept subjects, between Run and Flush.
	mu    sync.Mutex
	hours map[RouteHour]*hourState
}

type hourState struct {
	totals  map[string]int
	kind    map[string]Kind
	full    int
	sampled int
}

// maxTracked bounds the per-route-hour totals used to find the busiest
// subjects; subjects first seen beyond it can only be sampled.
const maxTracked = 10000

// maxStripes is how many tables the request path counts arrivals in:
// enough that concurrent requests on a few cores rarely meet on one lock.
const maxStripes = 16

// stripe is one table of arrival counts, padded so that no two stripes
// share a cache line.
type stripe struct {
	mu     sync.Mutex
	counts map[event]int
	// last and lastN are the stripe's latest arrival and its count so far,
	// not yet in counts: a busy subject's requests come in runs, and a run
	// costs one comparison per request instead of hashing the arrival into
	// the table (560 -> 120 instructions per Record of one subject,
	// callgrind, BenchmarkMiddleware/recording).
	last  event
	lastN int
	// spare is the table the next drain swaps in; only drains touch it.
	spare map[event]int
	_     [56]byte // to 128 bytes, two cache lines
}

// NewRecorder returns a Recorder writing to sink; call Run to start it.
func NewRecorder(sink Sink, opts Options) *Recorder {
	opts.defaults()
	n := min(maxStripes, opts.Buffer)
	r := &Recorder{sink: sink, opts: opts, seed: maphash.MakeSeed(), hours: map[RouteHour]*hourState{},
		stripes: make([]stripe, n), stripeCap: opts.Buffer / n}
	for i := range r.stripes {
		r.stripes[i].counts = map[event]int{}
		r.stripes[i].spare = map[event]int{}
	}
	return r
}

// Record notes one arrival. It holds a stripe's lock for one count and
// never waits for the aggregator; when the stripe already holds its share
// of Options.Buffer distinct arrivals, a new one is dropped and counted
// (Dropped) when it is settled into the stripe's table.
//
// It used to send the arrival on a buffered channel that Run drained: the
// send and the drain's receive and tally cost about 1,250 instructions per
// recorded request (callgrind, BenchmarkMiddleware/recording); counting in
// place costs a random stripe, a lock and a map increment, and a drain
// handles each distinct arrival once instead of each request.
func (r *Recorder) Record(route, subject string, at time.Time) {
	e := event{route: route, subject: subject, sec: at.Unix()}
	// A random stripe rather than one by subject: one busy subject's
	// requests would otherwise all meet on one lock.
	s := &r.stripes[rand.Uint32()%uint32(len(r.stripes))]
	s.mu.Lock()
	if s.lastN > 0 && e == s.last {
		s.lastN++
	} else {
		r.settle(s)
		s.last, s.lastN = e, 1
	}
	s.mu.Unlock()
}

// settle moves s's latest arrival into its table, or counts it dropped when
// the table already holds its share of distinct arrivals. s.mu is held.
func (r *Recorder) settle(s *stripe) {
	if s.lastN == 0 {
		return
	}
	if n, ok := s.counts[s.last]; ok {
		s.counts[s.last] = n + s.lastN
	} else if len(s.counts) < r.stripeCap {
		s.counts[s.last] = s.lastN
	} else {
		r.dropped.Add(int64(s.lastN))
	}
	s.last, s.lastN = event{}, 0
}

// Dropped is how many arrivals full stripes have dropped.
func (r *Recorder) Dropped() int64 { return r.dropped.Load() }

// SampleEvery is the sampling rate of subjects outside the busiest.
func (r *Recorder) SampleEvery() int { return r.opts.SampleEvery }

// drainEvery is how often Run empties the request path's stripes into its
// counts. Run used to wait for each arrival, so nearly every one woke it: a
// hand-off to a parked goroutine and its scheduling cost the portal about
// 0.3 us of CPU per recorded request, 10 % of what its limits cost on the
// memory store (PROFILE=anon scripts/bench.sh). At this interval the
// default Buffer holds 800,000 distinct arrivals a second.
const drainEvery = 20 * time.Millisecond

// Run aggregates and flushes until ctx ends, then flushes what is left.
func (r *Recorder) Run(ctx context.Context) error {
	t := time.NewTicker(r.opts.FlushEvery)
	defer t.Stop()
	d := time.NewTicker(drainEvery)
	defer d.Stop()
	pending := map[event]int{}
	for {
		select {
		case <-d.C:
			r.drain(pending)
		case <-t.C:
			r.drain(pending)
			r.flush(ctx, pending)
			pending = map[event]int{}
		case <-ctx.Done():
			r.drain(pending)
			r.flush(context.WithoutCancel(ctx), pending)
			return nil
		}
	}
}

// Flush drains the buffer and writes it now (tests, and shutdown).
func (r *Recorder) Flush(ctx context.Context) {
	pending := map[event]int{}
	r.drain(pending)
	r.flush(ctx, pending)
}

// drain adds every counted arrival to pending, swapping each stripe's
// table for its emptied spare so the request path waits only for a swap.
func (r *Recorder) drain(pending map[event]int) {
	r.drainMu.Lock()
	defer r.drainMu.Unlock()
	for i := range r.stripes {
		s := &r.stripes[i]
		s.mu.Lock()
		r.settle(s)
		full := s.counts
		s.counts = s.spare
		s.mu.Unlock()
		for e, n := range full {
			pending[e] += n
		}
		clear(full)
		s.spare = full
	}
}

func (r *Recorder) flush(ctx context.Context, pending map[event]int) {
	if len(pending) == 0 {
		return
	}
	r.mu.Lock()
	batch, unrecorded := r.choose(pending)
	r.mu.Unlock()
	if len(batch) == 0 && len(unrecorded) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := r.sink.Add(ctx, batch, unrecorded); err != nil {
		r.opts.Logger.Warn("traffic recording: write failed; these arrivals are lost", "err", err)
	}
}

// choose decides which subjects are kept, updating the hours' state.
func (r *Recorder) choose(pending map[event]int) ([]Counts, map[RouteHour]int) {
	type sk struct {
		rh      RouteHour
		subject string
	}
	grouped := map[sk]map[int]int{}
	for e, n := range pending {
		rh := RouteHour{e.route, e.sec / 3600}
		k := sk{rh, e.subject}
		if grouped[k] == nil {
			grouped[k] = map[int]int{}
		}
		grouped[k][int(e.sec%3600)] += n
	}
	// Forget hours past retention.
	newest := int64(0)
	for k := range grouped {
		newest = max(newest, k.rh.Hour)
	}
	for rh := range r.hours {
		if rh.Hour < newest-int64(Retention/time.Hour) {
			delete(r.hours, rh)
		}
	}
	routes := map[string]bool{}
	for rh := range r.hours {
		routes[rh.Route] = true
	}
	var batch []Counts
	unrecorded := map[RouteHour]int{}
	byHour := map[RouteHour][]sk{}
	for k, secs := range grouped {
		st := r.hours[k.rh]
		if st == nil {
			if !routes[k.rh.Route] && len(routes) >= r.opts.MaxRoutes {
				for _, n := range secs {
					unrecorded[k.rh] += n
				}
				continue
			}
			routes[k.rh.Route] = true
			st = &hourState{totals: map[string]int{}, kind: map[string]Kind{}}
			r.hours[k.rh] = st
		}
		for _, n := range secs {
			if _, tracked := st.totals[k.subject]; tracked || len(st.totals) < maxTracked {
				st.totals[k.subject] += n
			}
		}
		byHour[k.rh] = append(byHour[k.rh], k)
	}
	for rh, keys := range byHour {
		st := r.hours[rh]
		busiest := st.busiest(r.opts.Full)
		for _, k := range keys {
			kind, ok := st.kind[k.subject]
			switch {
			case ok:
			case st.full < r.opts.Full && slices.Contains(busiest, k.subject):
				kind, ok = KindFull, true
				st.full++
			case st.sampled < r.opts.MaxSampled && maphash.String(r.seed, k.subject)%uint64(r.opts.SampleEvery) == 0:
				kind, ok = KindSampled, true
				st.sampled++
			}
			if !ok {
				for _, n := range grouped[k] {
					unrecorded[rh] += n
				}
				continue
			}
			st.kind[k.subject] = kind
			batch = append(batch, Counts{Route: rh.Route, Hour: rh.Hour, Subject: k.subject, Kind: kind, Seconds: grouped[k]})
		}
	}
	return batch, unrecorded
}

// busiest returns the n subjects with the most arrivals this hour.
func (st *hourState) busiest(n int) []string {
	subjects := make([]string, 0, len(st.totals))
	for s := range st.totals {
		subjects = append(subjects, s)
	}
	slices.SortFunc(subjects, func(a, b string) int {
		if st.totals[a] != st.totals[b] {
			return st.totals[b] - st.totals[a]
		}
		if a < b {
			return -1
		}
		return 1
	})
	return subjects[:min(n, len(subjects))]
}

// Load returns the route's arrivals since since (at most Retention ago).
func (r *Recorder) Load(ctx context.Context, route string, since time.Time) (Recorded, error) {
	now := r.opts.Now()
	if since.Before(now.Add(-Retention)) {
		since = now.Add(-Retention)
	}
	rec, err := r.sink.Load(ctx, route, since.Unix()/3600, now.Unix()/3600)
	if err != nil {
		return Recorded{}, fmt.Errorf("load recorded traffic of %q: %w", route, err)
	}
	for subject, series := range rec.Series {
		for sec := range series {
			if sec < since.Unix() {
				delete(series, sec)
			}
		}
		if len(series) == 0 {
			delete(rec.Series, subject)
			delete(rec.Subjects, subject)
		}
	}
	rec.SampleEvery = r.opts.SampleEvery
	return rec, nil
}

// Routes lists the routes with recorded arrivals.
func (r *Recorder) Routes(ctx context.Context) ([]string, error) { return r.sink.Routes(ctx) }

// Store wraps the engine's store so that every decision the middleware
// asks for is recorded as an arrival; decisions are unchanged.
type Store struct {
	enforce.Store
	rec  *Recorder
	into interface {
		AllowInto(ctx context.Context, req enforce.Request, layers []enforce.LayerResult) (enforce.Decision, error)
	}
}

// Wrap returns store recording into rec.
func Wrap(store enforce.Store, rec *Recorder) *Store {
	s := &Store{Store: store, rec: rec}
	s.into, _ = store.(interface {
		AllowInto(ctx context.Context, req enforce.Request, layers []enforce.LayerResult) (enforce.Decision, error)
	})
	return s
}

// Unwrap returns the wrapped store, whose properties are the Store's: the
// middleware learns from it that decisions carry their clock reading.
func (s *Store) Unwrap() enforce.Store { return s.Store }

// Allow decides with the wrapped store and records the arrival.
func (s *Store) Allow(ctx context.Context, req enforce.Request) (enforce.Decision, error) {
	d, err := s.Store.Allow(ctx, req)
	s.record(req, d, err)
	return d, err
}

// AllowInto keeps the memory store's allocation-free path.
func (s *Store) AllowInto(ctx context.Context, req enforce.Request, layers []enforce.LayerResult) (enforce.Decision, error) {
	if s.into == nil {
		return s.Allow(ctx, req)
	}
	d, err := s.into.AllowInto(ctx, req, layers)
	s.record(req, d, err)
	return d, err
}

// Refund passes a give-back to the wrapped store; it is no arrival.
func (s *Store) Refund(ctx context.Context, req enforce.Request, at time.Time) error {
	r, ok := s.Store.(enforce.Refunder)
	if !ok {
		return errors.ErrUnsupported
	}
	return r.Refund(ctx, req, at)
}

// Charge passes a charge after the response to the wrapped store; it is no
// arrival.
func (s *Store) Charge(ctx context.Context, req enforce.Request) error {
	c, ok := s.Store.(enforce.Charger)
	if !ok {
		return errors.ErrUnsupported
	}
	return c.Charge(ctx, req)
}

func (s *Store) record(req enforce.Request, d enforce.Decision, err error) {
	if err != nil && !errors.Is(err, enforce.ErrStoreUnavailable) {
		return // a malformed request, not an arrival
	}
	at := d.At
	if at.IsZero() {
		at = time.Now()
	}
	s.rec.Record(req.Route, req.Subject, at)
}

// Arrivals returns the recorded arrivals of the given subjects (all when
// none are named) as the playground replays them: a second's arrivals all
// at its start, since one second is the recording's resolution. Past
// playground.MaxArrivals it stops, one arrival over, so that the replay
// refuses the scenario without this having built all of a busy route's day.
func (rec Recorded) Arrivals(subjects ...string) []playground.Arrival {
	var out []playground.Arrival
	for subject, series := range rec.Series {
		if len(subjects) > 0 && !slices.Contains(subjects, subject) {
			continue
		}
		for sec, n := range series {
			at := time.Unix(sec, 0).UTC()
			for range n {
				if len(out) > playground.MaxArrivals {
					return out
				}
				out = append(out, playground.Arrival{At: at, Subject: subject, Route: rec.Route})
			}
		}
	}
	slices.SortStableFunc(out, func(a, b playground.Arrival) int {
		if c := a.At.Compare(b.At); c != 0 {
			return c
		}
		if a.Subject < b.Subject {
			return -1
		}
		if a.Subject > b.Subject {
			return 1
		}
		return 0
	})
	return out
}
