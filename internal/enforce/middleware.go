package enforce

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultMaxQueueWait bounds how long a queue-mode request may wait its turn
// when MiddlewareOptions.MaxQueueWait is zero.
const DefaultMaxQueueWait = 10 * time.Second

// MiddlewareOptions configures NewMiddleware. The zero value is usable: no
// trusted proxies, logs discarded, no metrics registered, the failure mode
// closed.
type MiddlewareOptions struct {
	// TrustedProxies are the peers whose X-Forwarded-For is believed (see
	// ClientIP); parse PORTAL_TRUSTED_PROXIES with ParseTrustedProxies.
	TrustedProxies []netip.Prefix
	// Logger receives store failures and resolver errors; never a key.
	Logger *slog.Logger
	// Registerer, when set, receives the middleware's metrics:
	// sluice_enforce_requests_total{route,plan,outcome} and
	// sluice_enforce_decision_seconds{route}.
	Registerer prometheus.Registerer
	// FailureMode says what a request gets when the store returns an error
	// (ErrStoreUnavailable): FailOpen admits it and marks the response with
	// HeaderStoreDegraded; anything else answers 503. FailLocal is carried
	// out by a FailoverStore with a local store, which then rarely returns
	// an error; set it here too so a failing local store answers 503.
	FailureMode FailureMode
	// MaxQueueWait bounds the wait of a queue-mode request (0 means
	// DefaultMaxQueueWait). A decision asking for a longer wait is answered
	// 429 at once rather than holding a connection; size queue-mode leaky
	// buckets so that Burst/rate stays below it.
	MaxQueueWait time.Duration
	// Now is the clock used for X-RateLimit-Reset (nil means time.Now).
	Now func() time.Time
}

// Middleware enforces each caller's limits on the routes it wraps. One
// Middleware serves any number of routes and goroutines.
type Middleware struct {
	store    Store
	resolver Resolver
	trusted  []netip.Prefix
	log      *slog.Logger
	failOpen bool
	maxWait  time.Duration
	now      func() time.Time
	metrics  *middlewareMetrics
}

// NewMiddleware returns a Middleware deciding with store (a memory store, a
// Redis store, or a FailoverStore around one) and identifying callers with
// resolver.
func NewMiddleware(store Store, resolver Resolver, opts MiddlewareOptions) *Middleware {
	m := &Middleware{
		store:    store,
		resolver: resolver,
		trusted:  opts.TrustedProxies,
		log:      opts.Logger,
		failOpen: opts.FailureMode == FailOpen,
		maxWait:  opts.MaxQueueWait,
		now:      opts.Now,
		metrics:  newMiddlewareMetrics(opts.Registerer),
	}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	if m.maxWait <= 0 {
		m.maxWait = DefaultMaxQueueWait
	}
	if m.now == nil {
		m.now = time.Now
	}
	return m
}

// Wrap returns next with the caller's limits enforced. Register the result on
// a ServeMux: the endpoint is identified by the pattern the mux matched
// (r.Pattern), so "/api/items/1" and "/api/items/2" share the tier of
// "GET /api/items/{id}". Outside a ServeMux (r.Pattern empty) only plan-wide
// limits apply.
//
// For every request: a presented key that is malformed, unknown, revoked or
// expired is answered 401 (never the anonymous plan); otherwise the caller's
// limits whose Route is "" or the pattern are decided in one Store.Allow. A
// route without applicable limits passes through untouched. Limited responses
// carry the headers of DESIGN.md. Over the limit, the layers' modes decide:
// 429 with Retry-After and a RejectionBody; for a tier in degrade mode, the
// handler runs with Degraded(ctx) true and the response is marked with
// HeaderDegraded. An admitted decision with a Delay (a leaky bucket in queue
// mode shaping traffic) waits before next runs, marked with
// HeaderQueueDelay; a request whose context ends while waiting never reaches
// next, and one whose wait would exceed MaxQueueWait is answered 429 at once.
// Only leaky buckets queue: a queue-mode limit of another algorithm, or a
// full leaky-bucket queue, answers 429 like reject mode.
//
// Handlers read the caller and the decision with CallerFrom and DecisionFrom.
func (m *Middleware) Wrap(next http.Handler) http.Handler {
	return m.wrap(next, false)
}

// WrapAsync is Wrap for handlers that accept work and run it later, such as a
// job queue answering 202: the queue delay is not slept in the request;
// instead the handler reads it from DecisionFrom(ctx).Delay and schedules the
// work to start after it, so the client gets its job URL at once while the
// job still waits its turn.
func (m *Middleware) WrapAsync(next http.Handler) http.Handler {
	return m.wrap(next, true)
}

func (m *Middleware) wrap(next http.Handler, async bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		caller, ok := m.identify(w, r)
		if !ok {
			return
		}
		route := r.Pattern
		limits := applicable(caller.Limits, route)
		if len(limits) == 0 {
			next.ServeHTTP(w, withState(r, &requestState{caller: caller}))
			return
		}

		start := time.Now()
		d, err := m.store.Allow(r.Context(), Request{Subject: caller.Subject, Route: route, Limits: limits})
		m.metrics.observe(route, time.Since(start))
		if err != nil {
			m.storeFailed(w, r, next, caller, route, err)
			return
		}
		h := w.Header()
		writeLimitHeaders(h, d, m.now())
		st := &requestState{caller: caller, decision: d}

		if !d.Allowed {
			exceeded, degrade := degradable(d)
			if !degrade {
				m.metrics.count(route, caller.Plan, "rejected")
				writeRejection(w, d)
				return
			}
			m.metrics.count(route, caller.Plan, "degraded")
			st.degraded = true
			h.Set(HeaderDegraded, exceeded)
			next.ServeHTTP(w, withState(r, st))
			return
		}

		if d.Delay > 0 {
			h.Set(HeaderQueueDelay, strconv.FormatInt(d.Delay.Milliseconds(), 10))
			if !async {
				if d.Delay > m.maxWait {
					m.metrics.count(route, caller.Plan, "rejected")
					writeQueueTooLong(w, d)
					return
				}
				if !sleep(r.Context(), d.Delay) {
					m.metrics.count(route, caller.Plan, "cancelled")
					writeError(w, http.StatusServiceUnavailable, "queue_wait_cancelled",
						"The request was cancelled while it waited its turn.")
					return
				}
			}
			m.metrics.count(route, caller.Plan, "queued")
		} else {
			m.metrics.count(route, caller.Plan, "admitted")
		}
		next.ServeHTTP(w, withState(r, st))
	})
}

// identify resolves the caller of r, answering 401 (and returning false)
// when a presented key is unusable.
func (m *Middleware) identify(w http.ResponseWriter, r *http.Request) (Caller, bool) {
	secret, presented := presentedKey(r)
	if !presented {
		return m.resolver.Anonymous(ClientIP(r, m.trusted)), true
	}
	if secret != "" {
		caller, err := m.resolver.ResolveKey(secret)
		if err == nil {
			return caller, true
		}
		if !errors.Is(err, ErrInvalidKey) {
			// The resolver works on an in-memory snapshot; any other error
			// is a bug or an unloaded snapshot, not the caller's fault.
			m.log.ErrorContext(r.Context(), "resolving API key", "err", err, "route", r.Pattern)
			writeError(w, http.StatusServiceUnavailable, "identity_unavailable",
				"The API key could not be checked right now; retry shortly.")
			return Caller{}, false
		}
	}
	m.metrics.count(r.Pattern, "", "unauthorized")
	w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
	writeError(w, http.StatusUnauthorized, "invalid_api_key",
		"The API key is malformed, unknown, revoked or expired. Send a valid key as \"Authorization: Bearer <key>\" or \"X-API-Key: <key>\", or no key at all for anonymous access.")
	return Caller{}, false
}

// storeFailed applies the failure mode to a request whose decision failed.
func (m *Middleware) storeFailed(w http.ResponseWriter, r *http.Request, next http.Handler, caller Caller, route string, err error) {
	if r.Context().Err() != nil {
		// The client went away; nobody reads this answer.
		m.metrics.count(route, caller.Plan, "cancelled")
		writeError(w, http.StatusServiceUnavailable, "request_cancelled", "The request was cancelled.")
		return
	}
	if errors.Is(err, ErrCircuitOpen) {
		// The breaker logged the outage once; a line per request would
		// flood the log for as long as it lasts.
		m.log.DebugContext(r.Context(), "rate-limit store bypassed", "route", route, "fail_open", m.failOpen)
	} else {
		m.log.WarnContext(r.Context(), "rate-limit decision failed", "err", err, "route", route, "fail_open", m.failOpen)
	}
	if m.failOpen {
		m.metrics.count(route, caller.Plan, "failed_open")
		w.Header().Set(HeaderStoreDegraded, "store-unavailable")
		next.ServeHTTP(w, withState(r, &requestState{caller: caller}))
		return
	}
	m.metrics.count(route, caller.Plan, "unavailable")
	w.Header().Set("Retry-After", "1")
	writeError(w, http.StatusServiceUnavailable, "rate_limit_unavailable",
		"Rate limits cannot be checked right now, so the request was not served; retry shortly.")
}

// writeQueueTooLong answers a queue-mode request whose turn is further away
// than the middleware will hold a connection.
func writeQueueTooLong(w http.ResponseWriter, d Decision) {
	retry := max(ceilSeconds(d.Delay), 1)
	body := RejectionBody{Error: "rate_limit_exceeded", RetryAfter: retry,
		Message: "The queue for this endpoint is too long to wait in. Retry in " + strconv.FormatInt(retry, 10) + " s."}
	if len(d.Layers) > 0 {
		body.Limit = d.Binding().Limit.Limit
		body.Policy = d.Binding().Limit.Name
	}
	w.Header().Set("Retry-After", strconv.FormatInt(retry, 10))
	writeJSON(w, http.StatusTooManyRequests, body)
}

// applicable returns the limits that apply to route: plan-wide ones and the
// route's own tiers, in their original order. It returns limits itself when
// all apply, sparing an allocation on the hot path.
func applicable(limits []Limit, route string) []Limit {
	n := 0
	for _, l := range limits {
		if l.Route == "" || l.Route == route {
			n++
		}
	}
	if n == len(limits) {
		return limits
	}
	if n == 0 {
		return nil
	}
	out := make([]Limit, 0, n)
	for _, l := range limits {
		if l.Route == "" || l.Route == route {
			out = append(out, l)
		}
	}
	return out
}

// degradable reports whether every layer that rejected d is in degrade mode,
// and names the first of them. One rejecting layer in reject or queue mode
// is enough for a 429.
func degradable(d Decision) (string, bool) {
	name := ""
	for _, l := range d.Layers {
		if l.Allowed {
			continue
		}
		if l.Limit.Mode != ModeDegrade {
			return "", false
		}
		if name == "" {
			name = l.Limit.Name
		}
	}
	return name, name != ""
}

// sleep waits d or until ctx ends, reporting whether the full wait elapsed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// requestState is what the middleware tells the handler, kept in one context
// value so a request costs one allocation for it.
type requestState struct {
	caller   Caller
	decision Decision
	degraded bool
}

type stateKey struct{}

func withState(r *http.Request, st *requestState) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), stateKey{}, st))
}

func stateFrom(ctx context.Context) *requestState {
	st, _ := ctx.Value(stateKey{}).(*requestState)
	return st
}

// CallerFrom returns the caller the middleware identified for the request
// whose context is ctx; ok is false outside a wrapped handler.
func CallerFrom(ctx context.Context) (Caller, bool) {
	st := stateFrom(ctx)
	if st == nil {
		return Caller{}, false
	}
	return st.caller, true
}

// DecisionFrom returns the decision the middleware made for the request whose
// context is ctx. ok is false outside a wrapped handler and when no decision
// was made (no limit applied, or the store failed and the mode is open).
func DecisionFrom(ctx context.Context) (Decision, bool) {
	st := stateFrom(ctx)
	if st == nil || st.decision.Layers == nil {
		return Decision{}, false
	}
	return st.decision, true
}

// Degraded reports whether the request is over a degrade-mode limit: the
// handler should serve a reduced or cached answer (the response is already
// marked with HeaderDegraded).
func Degraded(ctx context.Context) bool {
	st := stateFrom(ctx)
	return st != nil && st.degraded
}
