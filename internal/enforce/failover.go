package enforce

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// FailureMode says what a request gets while the shared store (Redis) is
// unreachable; PORTAL_REDIS_FAILURE_MODE holds one of its values.
type FailureMode string

const (
	// FailOpen admits every request without a decision and marks the
	// response with HeaderStoreDegraded: availability over enforcement.
	FailOpen FailureMode = "open"
	// FailClosed answers 503: enforcement over availability.
	FailClosed FailureMode = "closed"
	// FailLocal decides with a per-instance memory store whose limits are
	// divided by the number of instances, so the fleet as a whole stays near
	// the configured limits.
	FailLocal FailureMode = "local"
)

// ParseFailureMode parses "open", "closed" or "local".
func ParseFailureMode(s string) (FailureMode, error) {
	switch m := FailureMode(s); m {
	case FailOpen, FailClosed, FailLocal:
		return m, nil
	}
	return "", fmt.Errorf("redis failure mode %q: want open, closed or local", s)
}

// ErrCircuitOpen is returned (wrapped, together with ErrStoreUnavailable) by
// a FailoverStore without a local store while its circuit breaker is open:
// the primary was not called at all.
var ErrCircuitOpen = errors.New("circuit breaker open")

// Defaults for FailoverOptions' zero fields.
//
// The timeout sits well above a healthy Redis's worst latency and the
// threshold above what tail latency alone produces in a row: on a 2-core
// machine saturated by load generator, server and Redis together, decisions
// took up to 25-40 ms at p99, so the former 50 ms and 3 failures opened the
// breaker on a Redis that was merely busy, and every instance then enforced
// its divided local limits instead of the shared ones. A Redis that is down
// refuses connections at once and still opens the breaker within 5 requests;
// only a hung one makes those 5 wait (mostly concurrently) for 100 ms, after
// which the breaker adds nothing for DefaultBreakerCooldown at a time.
const (
	DefaultStoreTimeout     = 100 * time.Millisecond
	DefaultFailureThreshold = 5
	DefaultBreakerCooldown  = time.Second
)

// FailoverOptions configures NewFailoverStore.
type FailoverOptions struct {
	// Timeout bounds each call to the primary (0 means
	// DefaultStoreTimeout) through its context's deadline, so a hung Redis
	// costs a request at most this. The primary must honour the deadline, as
	// RedisStore does; calling it in a goroutine to enforce the bound
	// regardless would cost every request more than the guard is worth. A
	// primary whose own Timeout is no longer (a RedisStore configured as the
	// portal does) bounds its calls itself, and no deadline is added.
	Timeout time.Duration
	// FailureThreshold is how many consecutive failed calls open the
	// breaker (0 means DefaultFailureThreshold).
	FailureThreshold int
	// Cooldown is how long the breaker stays open before one request probes
	// the primary again (0 means DefaultBreakerCooldown).
	Cooldown time.Duration
	// Local, when set, decides while the primary is failing (FailLocal):
	// pass a memory store. When nil, failures are returned as errors wrapping
	// ErrStoreUnavailable and the middleware's FailureMode applies.
	Local Store
	// Instances is how many app instances share the primary
	// (PORTAL_INSTANCES); the local store enforces each Limit and Burst
	// divided by it, rounded up, at least 1. Values below 1 mean 1.
	Instances int
	// Logger receives breaker transitions (open, recovered).
	Logger *slog.Logger
	// Registerer, when set, receives sluice_store_breaker_open (1 while
	// calls bypass the primary) and sluice_store_failures_total.
	Registerer prometheus.Registerer
	// Now is the breaker's clock (nil means time.Now).
	Now func() time.Time
}

type breakerState int

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

// FailoverStore is a Store that guards a primary store (Redis) with a
// per-call timeout and a circuit breaker: after FailureThreshold consecutive
// failures (errors wrapping ErrStoreUnavailable, or no answer within
// Timeout; other errors such as ErrInvalidRequest are returned as they are)
// the breaker opens and the primary is not called at all for
// Cooldown, so a dead Redis adds nothing to requests; then a single request
// probes it, and one success closes the breaker again. While the primary is
// bypassed or failing, decisions come from the local store when there is one,
// else an error wrapping ErrStoreUnavailable is returned.
type FailoverStore struct {
	primary   Store
	local     Store
	instances int64
	timeout   time.Duration
	threshold int
	cooldown  time.Duration
	log       *slog.Logger
	now       func() time.Time

	breakerGauge prometheus.Gauge
	failureCount prometheus.Counter

	mu       sync.Mutex
	state    breakerState
	failures int
	openedAt time.Time
}

// NewFailoverStore wraps primary; see FailoverStore.
func NewFailoverStore(primary Store, opts FailoverOptions) *FailoverStore {
	s := &FailoverStore{
		primary:   primary,
		local:     opts.Local,
		instances: int64(max(opts.Instances, 1)),
		timeout:   opts.Timeout,
		threshold: opts.FailureThreshold,
		cooldown:  opts.Cooldown,
		log:       opts.Logger,
		now:       opts.Now,
		breakerGauge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_store_breaker_open",
			Help: "1 while the rate-limit store's circuit breaker is open or half-open (the primary store is bypassed), else 0.",
		}),
		failureCount: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_store_failures_total",
			Help: "Calls to the primary rate-limit store that failed or timed out.",
		}),
	}
	if s.timeout <= 0 {
		s.timeout = DefaultStoreTimeout
	}
	if s.threshold <= 0 {
		s.threshold = DefaultFailureThreshold
	}
	if s.cooldown <= 0 {
		s.cooldown = DefaultBreakerCooldown
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	if opts.Registerer != nil {
		s.breakerGauge = registerOrReuse(opts.Registerer, s.breakerGauge)
		s.failureCount = registerOrReuse(opts.Registerer, s.failureCount)
	}
	return s
}

// Allow decides with the primary, or the local store while the primary is
// bypassed or fails.
func (s *FailoverStore) Allow(ctx context.Context, req Request) (Decision, error) {
	return s.call(ctx, req, false, nil)
}

// AllowInto is Allow writing Decision.Layers into layers' backing array when
// it is large enough and the deciding store can (see MemoryStore.AllowInto).
func (s *FailoverStore) AllowInto(ctx context.Context, req Request, layers []LayerResult) (Decision, error) {
	return s.call(ctx, req, false, layers)
}

// Peek evaluates with the primary, or the local store while the primary is
// bypassed or fails; it consumes nothing either way.
func (s *FailoverStore) Peek(ctx context.Context, req Request) (Decision, error) {
	return s.call(ctx, req, true, nil)
}

// BreakerState reports "closed" (the primary is in use), "open" (bypassed)
// or "half-open" (one probe in flight), for readiness checks and the UI.
func (s *FailoverStore) BreakerState() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.String()
}

func (s *FailoverStore) call(ctx context.Context, req Request, peek bool, layers []LayerResult) (Decision, error) {
	probe, ok := s.acquire()
	if !ok {
		return s.fallback(ctx, req, peek, layers, ErrCircuitOpen)
	}
	d, err := s.callPrimary(ctx, req, peek, layers)
	if err == nil {
		s.succeeded(probe)
		return d, nil
	}
	if ctx.Err() != nil || !errors.Is(err, ErrStoreUnavailable) {
		// The caller gave up, or the store answered that the request itself
		// is wrong (ErrInvalidRequest, a script error): neither says the
		// primary is down, and the local store would not do better.
		s.abandoned(probe)
		return Decision{}, err
	}
	s.failed(probe, err)
	return s.fallback(ctx, req, peek, layers, err)
}

// acquire says whether this call may go to the primary, and whether it is
// the half-open probe.
func (s *FailoverStore) acquire() (probe, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.state {
	case breakerClosed:
		return false, true
	case breakerOpen:
		if s.now().Sub(s.openedAt) < s.cooldown {
			return false, false
		}
		s.state = breakerHalfOpen
		return true, true
	}
	// Half-open with a probe in flight: everyone else keeps off the primary.
	return false, false
}

func (s *FailoverStore) succeeded(probe bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures = 0
	if probe && s.state == breakerHalfOpen {
		s.state = breakerClosed
		s.breakerGauge.Set(0)
		s.log.Info("rate-limit store recovered; circuit breaker closed",
			"bypassed_for", s.now().Sub(s.openedAt).Round(time.Millisecond).String())
	}
}

// abandoned ends a call that proved nothing either way.
func (s *FailoverStore) abandoned(probe bool) {
	if !probe {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == breakerHalfOpen {
		// Let the next request probe, without waiting another cool-down.
		s.state = breakerOpen
		s.openedAt = s.now().Add(-s.cooldown)
	}
}

func (s *FailoverStore) failed(probe bool, err error) {
	s.failureCount.Inc()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures++
	switch {
	case probe && s.state == breakerHalfOpen:
		s.state = breakerOpen
		s.openedAt = s.now()
		s.log.Warn("rate-limit store still failing; circuit breaker stays open", "err", err, "cooldown", s.cooldown.String())
	case s.state == breakerClosed && s.failures >= s.threshold:
		s.state = breakerOpen
		s.openedAt = s.now()
		s.breakerGauge.Set(1)
		s.log.Error("rate-limit store failing; circuit breaker open", "err", err,
			"consecutive_failures", s.failures, "cooldown", s.cooldown.String(), "local_fallback", s.local != nil)
	}
}

// boundedStore is a Store that fails a call itself, with
// ErrStoreUnavailable, once the call has waited Timeout (RedisStore).
type boundedStore interface {
	Store
	Timeout() time.Duration
}

// callPrimary runs one call under the timeout. A deadline that expires
// while the caller is still waiting is the primary's failure, whatever error
// the primary reports for it.
func (s *FailoverStore) callPrimary(ctx context.Context, req Request, peek bool, layers []LayerResult) (Decision, error) {
	if b, ok := s.primary.(boundedStore); ok && b.Timeout() <= s.timeout {
		// The primary bounds its own calls (a RedisStore fails one with
		// ErrStoreUnavailable at its Timeout): a second deadline would
		// only cost a context and a timer per decision.
		return allowOrPeek(ctx, s.primary, req, peek, layers)
	}
	tctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	d, err := allowOrPeek(tctx, s.primary, req, peek, layers)
	if err != nil && ctx.Err() == nil && tctx.Err() != nil && !errors.Is(err, ErrStoreUnavailable) {
		err = fmt.Errorf("%w: no answer within %s: %w", ErrStoreUnavailable, s.timeout, err)
	}
	return d, err
}

func (s *FailoverStore) fallback(ctx context.Context, req Request, peek bool, layers []LayerResult, cause error) (Decision, error) {
	if s.local == nil {
		if errors.Is(cause, ErrStoreUnavailable) {
			return Decision{}, cause
		}
		return Decision{}, fmt.Errorf("%w: %w", ErrStoreUnavailable, cause)
	}
	return allowOrPeek(ctx, s.local, divideLimits(req, s.instances), peek, layers)
}

// allowOrPeek peeks or allows req on store, into layers when given and the
// store can.
func allowOrPeek(ctx context.Context, store Store, req Request, peek bool, layers []LayerResult) (Decision, error) {
	if peek {
		return store.Peek(ctx, req)
	}
	if into, ok := store.(layersAllower); ok && layers != nil {
		return into.AllowInto(ctx, req, layers)
	}
	return store.Allow(ctx, req)
}

// divideLimits returns req with each Limit and Burst divided by n, rounded up
// and at least 1, so that n instances deciding alone admit about what the
// shared store would. A Burst of 0 keeps its meaning ("Limit", or no queue).
func divideLimits(req Request, n int64) Request {
	if n <= 1 {
		return req
	}
	limits := make([]Limit, len(req.Limits))
	for i, l := range req.Limits {
		l.Limit = max((l.Limit+n-1)/n, 1)
		if l.Burst > 0 {
			l.Burst = max((l.Burst+n-1)/n, 1)
		}
		limits[i] = l
	}
	req.Limits = limits
	return req
}
