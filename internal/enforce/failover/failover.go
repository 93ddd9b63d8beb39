// Package failover wraps a shared Store with a timeout and a circuit
// breaker, falling back to a local Store (each limit divided by the
// instance count) while the shared one is unreachable.
package failover

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/storemetrics"
)

// Defaults for FailoverOptions' zero fields (its Timeout defaults to
// enforce.DefaultStoreTimeout).
//
// DefaultStoreTimeout was sized from a measurement (docs/failure.md, "Why the
// timeout is 1 s"): on this project's 2-core machine running the end-to-end
// benchmark (wrk, server, Redis) plus one CPU-burning process per core, load
// average 6 - 10, a healthy Redis answered 64 concurrent callers' decisions
// in 63 - 377 ms at p99.9 and 704 ms at the worst of 1.6 million (four runs
// on 1,000 subjects and four on one hot subject; a starved host's scheduler,
// not Redis, makes that tail). One second is 2.7 times the worst p99.9, so a
// busy host's stall is waited out and the decision stays Redis's and exact.
// The price is paid only by a hung Redis, whose decisions wait up to a second
// each until the breaker opens (within about two seconds); a Redis that is
// down refuses connections at once, so its failures cost nothing while the
// breaker gathers them.
//
// The breaker opens on an outage, not on a stall: only when, over the last
// DefaultBreakerWindow, at least DefaultBreakerMinRequests decisions were
// made, at least DefaultBreakerMinFailures distinct failures happened, and
// failures were at least DefaultBreakerFailureRatio of the outcomes. A
// batch of decisions that failed together (one script call, one pipeline)
// is one failure: one stalled round trip cannot look like 64.
const (
	DefaultBreakerWindow       = 2 * time.Second
	DefaultBreakerMinRequests  = 20
	DefaultBreakerMinFailures  = 3
	DefaultBreakerFailureRatio = 0.5
	DefaultBreakerCooldown     = time.Second
	DefaultBreakerProbes       = 3
)

// Options configures New.
type Options struct {
	// Timeout bounds each call to the primary (0 means
	// DefaultStoreTimeout) through its context's deadline, so a hung Redis
	// costs a request at most this. The primary must honour the deadline, as
	// redisstore.Store does; calling it in a goroutine to enforce the bound
	// regardless would cost every request more than the guard is worth. A
	// primary whose own Timeout is no longer (a redisstore.Store configured as the
	// portal does) bounds its calls itself, and no deadline is added.
	Timeout time.Duration
	// Window is the span over which the breaker weighs outcomes (0 means
	// DefaultBreakerWindow).
	Window time.Duration
	// MinRequests is how many decisions the window must hold before the
	// breaker may open (0 means DefaultBreakerMinRequests), so a quiet
	// instance's one failure never opens it.
	MinRequests int
	// MinFailures is how many distinct failures (a failed batch counts
	// once) the window must hold before the breaker may open (0 means
	// DefaultBreakerMinFailures).
	MinFailures int
	// FailureRatio is the share of outcomes, failures over failures plus
	// successful decisions, at or above which the breaker opens (0 means
	// DefaultBreakerFailureRatio).
	FailureRatio float64
	// Cooldown is how long the breaker stays open before it probes the
	// primary again (0 means DefaultBreakerCooldown).
	Cooldown time.Duration
	// Probes is how many successful probes in a row close the breaker
	// again (0 means DefaultBreakerProbes); one probe is in flight at a
	// time, and a failed one opens the breaker for another Cooldown.
	Probes int
	// Local, when set, decides while the primary is failing (FailLocal):
	// pass a memory store. When nil, failures are returned as errors wrapping
	// ErrStoreUnavailable and the middleware's FailureMode applies.
	Local enforce.Store
	// Instances is how many app instances share the primary
	// (PORTAL_INSTANCES); the local store enforces each Limit and Burst
	// divided by it, rounded up, at least 1. Values below 1 mean 1.
	Instances int
	// Logger receives breaker transitions (open, recovered).
	Logger *slog.Logger
	// Registerer, when set, receives sluice_store_breaker_open (1 while
	// calls bypass the primary), sluice_store_breaker_opens_total{reason}
	// and sluice_store_failures_total.
	Registerer prometheus.Registerer
	// Now is the breaker's clock (nil means time.Now): its window and
	// cool-down are measured on it, so a test can step it.
	Now func() time.Time
}

type breakerState int32

const (
	breakerClosed breakerState = iota
	breakerOpen
	breakerHalfOpen
)

func (s breakerState) String() string {
	switch s {
	case breakerOpen:
		return "open"
	case breakerHalfOpen:
		return "half-open"
	}
	return "closed"
}

// Reasons the breaker opened, the reason label of
// sluice_store_breaker_opens_total: most failures in the window were
// refused or reset connections (a Redis that is down), timeouts (a hung
// or unreachable-by-route Redis) or other errors (a Redis that answers
// with errors).
const (
	openReasonRefused  = "refused"
	openReasonTimeouts = "timeouts"
	openReasonErrors   = "errors"
)

// failover.Store is a Store that guards a primary store (Redis) with a
// per-call timeout and a circuit breaker. Failures are errors wrapping
// ErrStoreUnavailable or no answer within Timeout; other errors such as
// ErrInvalidRequest are returned as they are. The breaker weighs the
// outcomes of a sliding window (see DefaultBreakerWindow): failures that
// share a cause (one failed batch of a redisstore.Store) count as one, and it
// opens only when failures dominate a window with enough traffic. While
// open, the primary is not called at all for Cooldown, so a dead Redis adds
// nothing to requests; then probes go to the primary one at a time, and
// Probes successes in a row close the breaker. While the primary is
// bypassed or failing, decisions come from the local store when there is
// one (marked Decision.Local), else an error wrapping ErrStoreUnavailable is
// returned.
type Store struct {
	primary     enforce.Store
	local       enforce.Store
	instances   int64
	timeout     time.Duration
	minRequests int
	minFailures int
	ratio       float64
	cooldown    time.Duration
	probes      int
	log         *slog.Logger
	now         func() time.Time

	breakerGauge prometheus.Gauge
	opens        *prometheus.CounterVec
	failureCount prometheus.Counter

	// state is read without the lock on every call: the closed breaker's
	// fast path takes the lock only to count the outcome.
	state atomic.Int32
	// uncaused numbers failures without a cause of their own, each its own.
	uncaused atomic.Uint64

	mu       sync.Mutex
	window   outcomeWindow
	openedAt time.Time
	probing  bool // a half-open probe is in flight
	passed   int  // probes that succeeded in a row while half-open
}

// New wraps primary; see Store.
func New(primary enforce.Store, opts Options) *Store {
	s := &Store{
		primary:     primary,
		local:       opts.Local,
		instances:   int64(max(opts.Instances, 1)),
		timeout:     cmp.Or(opts.Timeout, enforce.DefaultStoreTimeout),
		minRequests: cmp.Or(opts.MinRequests, DefaultBreakerMinRequests),
		minFailures: cmp.Or(opts.MinFailures, DefaultBreakerMinFailures),
		ratio:       cmp.Or(opts.FailureRatio, DefaultBreakerFailureRatio),
		cooldown:    cmp.Or(opts.Cooldown, DefaultBreakerCooldown),
		probes:      cmp.Or(opts.Probes, DefaultBreakerProbes),
		log:         opts.Logger,
		now:         opts.Now,
		breakerGauge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_store_breaker_open",
			Help: "1 while the rate-limit store's circuit breaker is open or half-open (the primary store is bypassed), else 0.",
		}),
		opens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_store_breaker_opens_total",
			Help: "Times the rate-limit store's circuit breaker opened, by reason: timeouts or errors (what most failures of the window were).",
		}, []string{"reason"}),
		failureCount: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_store_failures_total",
			Help: "Calls to the primary rate-limit store that failed or timed out.",
		}),
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	s.window = newOutcomeWindow(cmp.Or(opts.Window, DefaultBreakerWindow), s.now())
	if opts.Registerer != nil {
		s.breakerGauge = storemetrics.RegisterOrReuse(opts.Registerer, s.breakerGauge)
		s.opens = storemetrics.RegisterOrReuse(opts.Registerer, s.opens)
		s.failureCount = storemetrics.RegisterOrReuse(opts.Registerer, s.failureCount)
	}
	return s
}

// Allow decides with the primary, or the local store while the primary is
// bypassed or fails.
func (s *Store) Allow(ctx context.Context, req enforce.Request) (enforce.Decision, error) {
	return s.call(ctx, req, false, nil)
}

// AllowInto is Allow writing Decision.Layers into layers' backing array when
// it is large enough and the deciding store can (see memstore.Store.AllowInto).
func (s *Store) AllowInto(ctx context.Context, req enforce.Request, layers []enforce.LayerResult) (enforce.Decision, error) {
	return s.call(ctx, req, false, layers)
}

// Peek evaluates with the primary, or the local store while the primary is
// bypassed or fails; it consumes nothing either way.
func (s *Store) Peek(ctx context.Context, req enforce.Request) (enforce.Decision, error) {
	return s.call(ctx, req, true, nil)
}

// BreakerState reports "closed" (the primary is in use), "open" (bypassed)
// or "half-open" (probing), for readiness checks and the UI.
func (s *Store) BreakerState() string {
	return breakerState(s.state.Load()).String()
}

func (s *Store) call(ctx context.Context, req enforce.Request, peek bool, layers []enforce.LayerResult) (enforce.Decision, error) {
	probe, ok := s.acquire()
	if !ok {
		return s.fallback(ctx, req, peek, layers, enforce.ErrCircuitOpen)
	}
	d, err := s.callPrimary(ctx, req, peek, layers)
	if err == nil {
		s.succeeded(probe)
		return d, nil
	}
	if ctx.Err() != nil || !errors.Is(err, enforce.ErrStoreUnavailable) {
		// The caller gave up, or the store answered that the request itself
		// is wrong (ErrInvalidRequest, a script error): neither says the
		// primary is down, and the local store would not do better.
		s.abandoned(probe)
		return enforce.Decision{}, err
	}
	s.failed(probe, err)
	return s.fallback(ctx, req, peek, layers, err)
}

// acquire says whether this call may go to the primary, and whether it is
// a half-open probe.
func (s *Store) acquire() (probe, ok bool) {
	if breakerState(s.state.Load()) == breakerClosed {
		return false, true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch breakerState(s.state.Load()) {
	case breakerClosed:
		return false, true
	case breakerOpen:
		if s.now().Sub(s.openedAt) < s.cooldown {
			return false, false
		}
		s.state.Store(int32(breakerHalfOpen))
		s.passed = 0
	}
	if s.probing {
		// One probe at a time: everyone else keeps off the primary.
		return false, false
	}
	s.probing = true
	return true, true
}

func (s *Store) succeeded(probe bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !probe {
		s.window.success(s.now())
		return
	}
	s.probing = false
	if breakerState(s.state.Load()) != breakerHalfOpen {
		return
	}
	s.passed++
	if s.passed < s.probes {
		return
	}
	now := s.now()
	s.state.Store(int32(breakerClosed))
	s.window.reset(now)
	s.breakerGauge.Set(0)
	s.log.Info("rate-limit store recovered; circuit breaker closed",
		"bypassed_for", now.Sub(s.openedAt).Round(time.Millisecond).String(), "probes", s.passed)
}

// abandoned ends a call that proved nothing either way.
func (s *Store) abandoned(probe bool) {
	if !probe {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.probing = false // the next request probes, without another cool-down
}

// failureCause is implemented by errors that name the batch of calls they
// failed with (redisstore.Store's), so that decisions failing together in one
// script call or pipeline count as one failure.
type failureCause interface {
	FailureCause() uint64
}

// uncausedBit keeps the numbers given to failures without a cause apart
// from a primary's batch numbers.
const uncausedBit = 1 << 63

func (s *Store) failed(probe bool, err error) {
	s.failureCount.Inc()
	var fc failureCause
	var cause uint64
	if errors.As(err, &fc) {
		cause = fc.FailureCause() &^ uncausedBit
	} else {
		cause = s.uncaused.Add(1) | uncausedBit
	}
	timeout := errors.Is(err, context.DeadlineExceeded) || isNetTimeout(err)
	refused := isRefused(err)

	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	switch breakerState(s.state.Load()) {
	case breakerHalfOpen:
		if probe {
			s.probing = false
			s.state.Store(int32(breakerOpen))
			s.openedAt = now
			s.log.Debug("rate-limit store still failing; circuit breaker stays open", "err", err, "cooldown", s.cooldown.String())
		}
		return
	case breakerOpen:
		return
	}
	w := &s.window
	w.failure(now, cause, timeout, refused)
	t := w.totals()
	if t.decisions < s.minRequests || t.failures < s.minFailures ||
		float64(t.failures) < s.ratio*float64(t.failures+t.successes) {
		return
	}
	reason := openReasonErrors
	switch {
	case 2*t.refused >= t.failures:
		reason = openReasonRefused
	case 2*t.timeouts >= t.failures:
		reason = openReasonTimeouts
	}
	s.state.Store(int32(breakerOpen))
	s.openedAt = now
	s.breakerGauge.Set(1)
	s.opens.WithLabelValues(reason).Inc()
	s.log.Error("rate-limit store failing; circuit breaker open",
		"reason", reason, "err", err, "window", w.span().String(),
		"failures", t.failures, "failed_decisions", t.decisions-t.successes, "successes", t.successes,
		"cooldown", s.cooldown.String(), "local_fallback", s.local != nil)
}

func isNetTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// outcomeWindow counts a breaker's outcomes over a sliding span, in
// windowSlots slots each span/windowSlots long, so the span slides in
// steps of a tenth; time is measured from the window's epoch, on the
// breaker's clock (monotonic in production).
type outcomeWindow struct {
	epoch time.Time
	slot  time.Duration
	// head is the number of the newest slot; slots[head%windowSlots] is it.
	head  int64
	slots [windowSlots]outcomeSlot
	// causes holds the failure causes already counted, with the slot each
	// was first seen in, so later failures of the same batch count only as
	// decisions.
	causes map[uint64]int64
}

const windowSlots = 10

type outcomeSlot struct {
	decisions, successes, failures, timeouts, refused int
}

func newOutcomeWindow(span time.Duration, now time.Time) outcomeWindow {
	return outcomeWindow{epoch: now, slot: max(span/windowSlots, time.Nanosecond), causes: make(map[uint64]int64)}
}

func (w *outcomeWindow) span() time.Duration { return w.slot * windowSlots }

// advance moves the window to now, emptying the slots it slid past.
func (w *outcomeWindow) advance(now time.Time) *outcomeSlot {
	n := int64(now.Sub(w.epoch) / w.slot)
	if n > w.head {
		for i := w.head + 1; i <= n && i <= w.head+windowSlots; i++ {
			w.slots[i%windowSlots] = outcomeSlot{}
		}
		w.head = n
		for c, at := range w.causes {
			if at <= n-windowSlots {
				delete(w.causes, c)
			}
		}
	}
	// A clock that stepped back counts in the newest slot.
	return &w.slots[w.head%windowSlots]
}

func (w *outcomeWindow) success(now time.Time) {
	sl := w.advance(now)
	sl.decisions++
	sl.successes++
}

func (w *outcomeWindow) failure(now time.Time, cause uint64, timeout, refused bool) {
	sl := w.advance(now)
	sl.decisions++
	if _, seen := w.causes[cause]; seen {
		return
	}
	w.causes[cause] = w.head
	sl.failures++
	if timeout {
		sl.timeouts++
	}
	if refused {
		sl.refused++
	}
}

func (w *outcomeWindow) totals() outcomeSlot {
	var t outcomeSlot
	for _, sl := range w.slots {
		t.decisions += sl.decisions
		t.successes += sl.successes
		t.failures += sl.failures
		t.timeouts += sl.timeouts
		t.refused += sl.refused
	}
	return t
}

// reset forgets every outcome: a breaker that closes starts afresh.
func (w *outcomeWindow) reset(now time.Time) {
	*w = newOutcomeWindow(w.span(), now)
}

// boundedStore is a Store that fails a call itself, with
// ErrStoreUnavailable, once the call has waited Timeout (redisstore.Store).
type boundedStore interface {
	enforce.Store
	Timeout() time.Duration
}

// callPrimary runs one call under the timeout. A deadline that expires
// while the caller is still waiting is the primary's failure, whatever error
// the primary reports for it.
func (s *Store) callPrimary(ctx context.Context, req enforce.Request, peek bool, layers []enforce.LayerResult) (enforce.Decision, error) {
	if b, ok := s.primary.(boundedStore); ok && b.Timeout() <= s.timeout {
		// The primary bounds its own calls (a redisstore.Store fails one with
		// ErrStoreUnavailable at its Timeout): a second deadline would
		// only cost a context and a timer per decision.
		return allowOrPeek(ctx, s.primary, req, peek, layers)
	}
	tctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	d, err := allowOrPeek(tctx, s.primary, req, peek, layers)
	if err != nil && ctx.Err() == nil && tctx.Err() != nil && !errors.Is(err, enforce.ErrStoreUnavailable) {
		err = fmt.Errorf("%w: no answer within %s: %w", enforce.ErrStoreUnavailable, s.timeout, err)
	}
	return d, err
}

func (s *Store) fallback(ctx context.Context, req enforce.Request, peek bool, layers []enforce.LayerResult, cause error) (enforce.Decision, error) {
	if s.local == nil {
		if errors.Is(cause, enforce.ErrStoreUnavailable) {
			return enforce.Decision{}, cause
		}
		return enforce.Decision{}, fmt.Errorf("%w: %w", enforce.ErrStoreUnavailable, cause)
	}
	d, err := allowOrPeek(ctx, s.local, s.localRequest(req), peek, layers)
	d.Local = err == nil
	return d, err
}

// allowOrPeek peeks or allows req on store, into layers when given and the
// store can.
func allowOrPeek(ctx context.Context, store enforce.Store, req enforce.Request, peek bool, layers []enforce.LayerResult) (enforce.Decision, error) {
	if peek {
		return store.Peek(ctx, req)
	}
	if into, ok := store.(enforce.LayersAllower); ok && layers != nil {
		return into.AllowInto(ctx, req, layers)
	}
	return store.Allow(ctx, req)
}

// localRequest returns req as the local store must see it, on every path
// that reaches it (decisions, charges, refunds, slots): each limit divided by
// the instance count. A charge or refund the local store took with whole
// limits would land on a state of other figures than its decisions'.
func (s *Store) localRequest(req enforce.Request) enforce.Request {
	return divideLimits(req, s.instances)
}

// settling returns the store a charge or refund goes to, and req as that
// store must see it: the primary while it is in use, the local store with
// req's limits divided (localRequest) while the breaker bypasses it.
func (s *Store) settling(req enforce.Request) (enforce.Store, enforce.Request) {
	if s.BreakerState() == "open" {
		return s.local, s.localRequest(req)
	}
	return s.primary, req
}

// divideLimits returns req with each Limit and Burst divided by n, rounded up
// and at least 1, so that n instances deciding alone admit about what the
// shared store would. A Burst of 0 keeps its meaning ("Limit", or no queue).
func divideLimits(req enforce.Request, n int64) enforce.Request {
	if n <= 1 {
		return req
	}
	limits := make([]enforce.Limit, len(req.Limits))
	for i, l := range req.Limits {
		limits[i] = enforce.ShareOf(l, n)
	}
	req.Limits = limits
	return req
}

// StampsDecisions reports whether both the primary and the local store
// stamp their decisions with their clock reading.
func (s *Store) StampsDecisions() bool {
	return enforce.StampsDecisions(s.primary) && (s.local == nil || enforce.StampsDecisions(s.local))
}
