// Package httplimit is the net/http way into the engine: it identifies the
// caller of a request (API key or client address, through trusted proxies),
// decides with the engine, writes the rate-limit headers and answers 429,
// queue or degrade as each tier says, and serves the status endpoint.
package httplimit

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/requestlog"
)

// DefaultMaxQueueWait bounds how long a queue-mode request may wait its turn
// when MiddlewareOptions.MaxQueueWait is zero.
const DefaultMaxQueueWait = 10 * time.Second

// MiddlewareOptions configures NewMiddleware. The zero value is usable: no
// trusted proxies, logs discarded, no metrics registered, the failure mode
// closed.
type Options struct {
	// TrustedProxies are the peers whose X-Forwarded-For is believed (see
	// ClientIP); parse PORTAL_TRUSTED_PROXIES with ParseTrustedProxies.
	TrustedProxies []netip.Prefix
	// Logger receives store failures and resolver errors; never a key.
	Logger *slog.Logger
	// Registerer, when set, receives the middleware's metrics:
	// sluice_enforce_requests_total{route,plan,outcome,way_in},
	// sluice_enforce_decision_seconds{route,way_in} and
	// sluice_shadow_rejections_total{plan,tier}.
	Registerer prometheus.Registerer
	// WayIn is the way_in label of the decisions this middleware makes (a
	// WayIn constant; "" means WayInMiddleware). A middleware serving
	// several ways in labels each with WayIn.
	WayIn string
	// Tracer, when set, traces every decision: a SpanDecision span with
	// the caller's plan and key id (never the key), the route, the way in
	// and an event per layer, and a SpanStore child for the store's part
	// (middleware_trace.go). Nil traces nothing and costs nothing.
	Tracer trace.Tracer
	// FailureMode says what a request gets when the store returns an error
	// (ErrStoreUnavailable): FailOpen admits it and marks the response with
	// HeaderStoreDegraded; anything else answers 503. FailLocal is carried
	// out by a failover.Store with a local store, which then rarely returns
	// an error; set it here too so a failing local store answers 503.
	FailureMode enforce.FailureMode
	// MaxQueueWait bounds the wait of a queue-mode request (0 means
	// DefaultMaxQueueWait). A decision asking for a longer wait is answered
	// 429 at once rather than holding a connection; size queue-mode leaky
	// buckets so that Burst/rate stays below it.
	MaxQueueWait time.Duration
	// Now is the clock used for X-RateLimit-Reset (nil means time.Now).
	Now func() time.Time
	// Shadow, when set, receives every request a shadow limit would have
	// rejected (besides sluice_shadow_rejections_total{plan,tier}), so a
	// dashboard can say who would have been rejected. It is called on the
	// request path and must not block.
	Shadow ShadowRecorder
	// SlotLease is how long a concurrency limit's slot is held without
	// renewal (0 means DefaultSlotLease): the most a crashed instance's
	// slots stay taken. A running request's slots are renewed every half
	// lease (see middleware_slots.go).
	SlotLease time.Duration
	// Record, when set, is told of every decided request: admitted when
	// the handler ran (admitted, queued, degraded, failed open), rejected
	// when it was answered 429. It is called on the request path and must
	// not block or allocate.
	Record DecisionRecorder
	// RequestLog, when set, is told of every decided request once its
	// answer is known (see RequestLog; the entry names the way in, as
	// WayIn does): admissions after the handler returned, with its status
	// and latency; refusals (401, 429, 503) as they are answered.
	RequestLog RequestLog
	// Settled, when set, is told of the units each settlement after a
	// response gave back or charged (see SettleRecorder), for metering.
	Settled SettleRecorder
}

// DecisionRecorder is told of each request the middleware decides, for
// usage history.
type DecisionRecorder interface {
	// RecordDecision tells of one decision about requests requests
	// (more than 1 for an Envoy request's hits_addend) of caller on route.
	RecordDecision(caller enforce.Caller, route string, requests int64, admitted bool)
}

// ShadowRecorder is told of each request a shadow limit (ModeShadow) would
// have rejected.
type ShadowRecorder interface {
	RecordShadow(ShadowRejection)
}

// ShadowRejection is one request a shadow limit would have rejected.
type ShadowRejection struct {
	Plan, Tier   string // the caller's plan and the shadow limit's name
	Subject, Key string // the caller's subject and key ("" if anonymous)
	At           time.Time
}

// Middleware enforces each caller's limits on the routes it wraps. One
// Middleware serves any number of routes and goroutines.
type Middleware struct {
	store  enforce.Store
	engine *enforce.Engine
	// decider is the engine the embedded path asks: the same store, but
	// it returns a store's failure so that storeFailed answers it (and
	// logs why) in the middleware's failure mode.
	decider  *enforce.Engine
	resolver enforce.Resolver
	trusted  []netip.Prefix
	log      *slog.Logger
	failOpen bool
	maxWait  time.Duration
	now      func() time.Time
	// stamped is true when every decision of the store carries its clock
	// reading (enforce.StampsDecisions): no clock read per request.
	stamped bool
	// epoch carries a monotonic reading: decision latency is measured as
	// two time.Since(epoch), one clock read each.
	epoch   time.Time
	routes  routeLimitsCache
	metrics *middlewareMetrics
	shadow  ShadowRecorder
	record  DecisionRecorder
	reqlog  RequestLog
	settled SettleRecorder
	// slots holds the concurrency limits' slots: the store, when it can.
	slots enforce.SlotStore
	lease time.Duration
	// tracer is nil when decisions are not traced; wayIn names the way in
	// on their spans.
	tracer trace.Tracer
	wayIn  string
}

// NewMiddleware returns a Middleware deciding with store (a memory store, a
// Redis store, or a failover.Store around one) and identifying callers with
// resolver.
func NewMiddleware(store enforce.Store, resolver enforce.Resolver, opts Options) *Middleware {
	m := &Middleware{
		store:    store,
		resolver: resolver,
		trusted:  opts.TrustedProxies,
		log:      opts.Logger,
		failOpen: opts.FailureMode == enforce.FailOpen,
		maxWait:  opts.MaxQueueWait,
		now:      opts.Now,
		epoch:    time.Now(),
		metrics:  newMiddlewareMetrics(opts.Registerer, opts.WayIn),
		shadow:   opts.Shadow,
		record:   opts.Record,
		reqlog:   opts.RequestLog,
		settled:  opts.Settled,
		tracer:   opts.Tracer,
		wayIn:    wayInName(opts.WayIn),
	}
	m.slots, _ = store.(enforce.SlotStore)
	m.stamped = enforce.StampsDecisions(store)
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	m.setEngines(opts.FailureMode, opts.SlotLease)
	if m.maxWait <= 0 {
		m.maxWait = DefaultMaxQueueWait
	}
	if m.now == nil {
		m.now = time.Now
	}
	return m
}

// WayIn returns a middleware that decides exactly as m does, on the same
// store, slots, resolver and recorders, and labels its decisions' metrics
// with way_in name (a WayIn constant; any other value is labelled
// "other"), so that each way in of one portal is told apart on /metrics.
func (m *Middleware) WayIn(name string) *Middleware {
	return &Middleware{store: m.store, engine: m.engine, decider: m.decider, resolver: m.resolver, trusted: m.trusted,
		log: m.log, failOpen: m.failOpen, maxWait: m.maxWait, now: m.now, stamped: m.stamped, epoch: m.epoch,
		metrics: m.metrics.forWayIn(name), shadow: m.shadow, record: m.record, slots: m.slots, lease: m.lease,
		reqlog: m.reqlog, settled: m.settled, tracer: m.tracer, wayIn: wayInName(name)}
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
// A full queue-mode concurrency limit waits for a free slot, at most
// MaxQueueWait, and says how long it waited in HeaderQueueDelay. Only those
// two queue: a queue-mode limit of another algorithm, or a full
// leaky-bucket queue, answers 429 like reject mode.
//
// Handlers read the caller and the decision with CallerFrom and DecisionFrom.
//
// The middleware remembers which of a caller's limits apply to each route
// by the identity of the Caller.Limits slice, so a Resolver must never
// modify a Limits slice it has returned: build a new one instead (the
// control plane's snapshots are immutable and do so).
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
		m.serve(w, r, r.Pattern, 1, next, async)
	})
}

// Enforce is Wrap for a request whose route was matched elsewhere, such as
// a gateway asking before it proxies, whose original method and URI were
// matched to route (a ServeMux pattern, "" for none) by the way in. The
// caller is identified from r itself (its key headers and, through trusted
// proxies, X-Forwarded-For), the same limits are consumed and the same
// headers and answers written as Wrap would for that route, and next runs
// when the request is admitted (after its queue delay, if any).
func (m *Middleware) Enforce(w http.ResponseWriter, r *http.Request, route string, next http.Handler) {
	m.serve(w, r, route, 1, next, false)
}

// EnforceHits is Enforce for a request that counts as hits requests (an
// Envoy rate-limit request's hits_addend): every limit's cost is multiplied
// by hits. hits below 1 count as 1.
func (m *Middleware) EnforceHits(w http.ResponseWriter, r *http.Request, route string, hits int64, next http.Handler) {
	m.serve(w, r, route, max(hits, 1), next, false)
}

func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, route string, hits int64, next http.Handler, async bool) {
	caller, ok := m.identify(w, r, route)
	if !ok {
		return
	}
	limits, fixed, series := m.routes.applicable(caller.Limits, route, caller.Plan, m.metrics)
	if hits > 1 && len(limits) > 0 {
		limits = enforce.WithHits(limits, hits)
	}
	if len(limits) == 0 {
		st := &requestState{caller: caller}
		m.serveNext(w, r, st, route, requestlog.Admitted, "", "", nil, next)
		return
	}
	st, scratch := newDecidedState(caller, len(limits))

	var before time.Time
	if !m.stamped {
		before = m.now()
	}
	start := time.Since(m.epoch)
	ctx, span := m.traceDecision(r.Context(), caller, route)
	sctx, storeSpan := m.traceStore(ctx, span)
	out, err := m.decide(sctx, caller, route, limits, scratch.layers)
	if out.Lease != nil {
		// The slots are held, and renewed, until the handler returns or
		// panics (middleware_slots.go).
		st.held = m.hold(sctx, out.Lease)
		defer st.held.release()
	}
	d := out.Decision
	endStore(storeSpan, err)
	endDecision(span, d, degradationOf(d), err)
	m.metrics.observeIn(series, route, time.Since(m.epoch)-start)
	if err != nil {
		m.storeFailed(w, r, next, st, route, hits, err)
		return
	}
	h := w.Header()
	if out.SlotWait > 0 {
		// Waited for a queue-mode concurrency slot; a leaky bucket's
		// delay below, still to be waited, takes the field over.
		h.Set(HeaderQueueDelay, strconv.FormatInt(out.SlotWait.Milliseconds(), 10))
	}
	if !policyDescribes(limits, d.Layers) {
		// The store decided other figures (a failover.Store's local
		// fallback divides each limit by the instance count).
		fixed = nil
	}
	if enforce.HasShadow(limits) {
		// Shadow layers are decided with the others but never shown:
		// count what they would have rejected, then hide them.
		m.countShadow(caller, d)
		d = d.Visible()
	}
	writeLimitHeaders(h, d, m.decidedAt(d, before), fixed, scratch.headers)
	if d.Local {
		// Decided on this instance's own counters while Redis is
		// unreachable: the headers describe those figures.
		h.Set(HeaderStoreDegraded, "local")
	} else if d.RegionShare {
		h.Set(HeaderStoreDegraded, "region-share")
	}
	st.decision = d

	if !d.Allowed {
		exceeded, degrade := d.Degradable()
		if !degrade {
			m.metrics.countIn(series, route, caller.Plan, "rejected")
			m.recordDecision(caller, route, hits, false)
			retry, body := rejection(d)
			// Logged before the answer goes out, so a client that holds
			// the answer finds the entry logged.
			if m.reqlog != nil {
				m.logRefusal(r, caller, route, &d, requestlog.Rejected, http.StatusTooManyRequests, firedLayer(d), retry)
			}
			writeRejectionBody(w, retry, body)
			return
		}
		m.metrics.count(route, caller.Plan, "degraded")
		m.recordDecision(caller, route, hits, true)
		st.degraded = true
		h.Set(HeaderDegraded, exceeded)
		m.serveNext(w, r, st, route, requestlog.Degraded, exceeded, "", nil, next)
		return
	}

	if d.Delay > 0 {
		h.Set(HeaderQueueDelay, strconv.FormatInt(d.Delay.Milliseconds(), 10))
		if !async {
			if d.Delay > m.maxWait {
				m.metrics.count(route, caller.Plan, "rejected")
				m.recordDecision(caller, route, hits, false)
				if m.reqlog != nil {
					m.logRefusal(r, caller, route, &d, requestlog.Rejected, http.StatusTooManyRequests, firedLayer(d), max(ceilSeconds(d.Delay), 1))
				}
				writeQueueTooLong(w, d)
				return
			}
			if !enforce.Sleep(r.Context(), d.Delay) {
				m.metrics.count(route, caller.Plan, "cancelled")
				writeError(w, http.StatusServiceUnavailable, "queue_wait_cancelled",
					"The request was cancelled while it waited its turn.")
				return
			}
		}
		m.metrics.count(route, caller.Plan, "queued")
	} else {
		m.metrics.countIn(series, route, caller.Plan, "admitted")
	}
	m.recordDecision(caller, route, hits, true)
	o := requestlog.Admitted
	if d.Delay > 0 {
		o = requestlog.Queued
	}
	var settle []enforce.Limit
	if enforce.Settles(limits) {
		settle = limits
	}
	m.serveNext(w, r, st, route, o, "", "", settle, next)
}

// recordDecision tells the DecisionRecorder, if any, of one decision.
func (m *Middleware) recordDecision(caller enforce.Caller, route string, hits int64, admitted bool) {
	if m.record != nil {
		m.record.RecordDecision(caller, route, hits, admitted)
	}
}

// countShadow counts, per plan and tier, the requests d's shadow layers
// would have rejected, and hands each to the ShadowRecorder, if any. A
// request the enforced layers refused is none of theirs (it was not going
// through either way), so only admitted requests are counted.
func (m *Middleware) countShadow(caller enforce.Caller, d enforce.Decision) {
	if !d.Allowed {
		return
	}
	for i := range d.Layers {
		l := &d.Layers[i]
		if l.Limit.Mode != enforce.ModeShadow || l.Allowed {
			continue
		}
		m.metrics.countShadow(caller.Plan, l.Limit.Name)
		if m.shadow != nil {
			at := d.At
			if at.IsZero() {
				at = m.now()
			}
			m.shadow.RecordShadow(ShadowRejection{Plan: caller.Plan, Tier: l.Limit.Name, Subject: caller.Subject, Key: caller.Key, At: at})
		}
	}
}

// decide asks the engine about caller's request on route, as every way
// in does, into layers (the request state's own) when the store can;
// limits are the caller's already filtered to the route (Applicable keeps
// them as they are) and multiplied by its hits. A refused queue-mode
// concurrency slot is waited for as long as a leaky bucket's turn.
func (m *Middleware) decide(ctx context.Context, caller enforce.Caller, route string, limits []enforce.Limit, layers []enforce.LayerResult) (enforce.Outcome, error) {
	c := enforce.Caller{Subject: caller.Subject, Key: caller.Key, Limits: limits, Anchor: caller.Anchor}
	return m.decider.DecideInto(ctx, enforce.Ask{Caller: c, Route: route, QueueFor: m.maxWait}, layers)
}

// setEngines builds m's engines over its store with slots of lease (0
// means DefaultSlotLease): the engine of Check, in the failure mode, and
// the decider of the embedded path, which returns a store's failure for
// storeFailed to answer.
func (m *Middleware) setEngines(mode enforce.FailureMode, lease time.Duration) {
	lease = cmp.Or(lease, enforce.DefaultSlotLease)
	m.lease = lease
	m.engine = enforce.NewEngine(m.store, enforce.EngineOptions{FailureMode: mode, SlotLease: lease, Logger: m.log})
	m.decider = enforce.NewEngine(m.store, enforce.EngineOptions{FailureMode: enforce.FailClosed, SlotLease: lease, Logger: m.log})
}

// decidedAt is the instant d's ResetAfter counts from: the store's own
// clock reading when it gives one, else the middleware's clock read just
// before the decision. That reading is at most the store's (on one clock),
// so a window ending on a whole second is never reported a second late.
func (m *Middleware) decidedAt(d enforce.Decision, before time.Time) time.Time {
	if !d.At.IsZero() {
		return d.At
	}
	if before.IsZero() {
		return m.now()
	}
	return before
}

// identify resolves the caller of r, answering 401 (and returning false)
// when a presented key is unusable.
func (m *Middleware) identify(w http.ResponseWriter, r *http.Request, route string) (enforce.Caller, bool) {
	secret, presented := presentedKey(r)
	if !presented {
		return m.resolver.Anonymous(ClientIP(r, m.trusted)), true
	}
	if secret != "" {
		caller, err := m.resolver.ResolveKey(secret)
		if err == nil {
			if caller.Scope != nil { // most keys have none: no address to work out
				if reason, ok := caller.Scope.Permits(requestMethod(r), route, ClientIP(r, m.trusted)); !ok {
					m.metrics.count(route, caller.Plan, "forbidden")
					writeError(w, http.StatusForbidden, "key_out_of_scope", reason)
					return enforce.Caller{}, false
				}
			}
			return caller, true
		}
		if !errors.Is(err, enforce.ErrInvalidKey) {
			// The resolver works on an in-memory snapshot; any other error
			// is a bug or an unloaded snapshot, not the caller's fault.
			m.log.ErrorContext(r.Context(), "resolving API key", "err", err, "route", route)
			writeError(w, http.StatusServiceUnavailable, "identity_unavailable",
				"The API key could not be checked right now; retry shortly.")
			return enforce.Caller{}, false
		}
	}
	m.metrics.count(route, "", "unauthorized")
	w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
	m.logRefusal(r, enforce.Caller{}, route, nil, requestlog.Unauthorized, http.StatusUnauthorized, "", 0)
	writeError(w, http.StatusUnauthorized, "invalid_api_key", invalidKeyMessage)
	return enforce.Caller{}, false
}

// storeFailed applies the failure mode to a request whose decision failed.
func (m *Middleware) storeFailed(w http.ResponseWriter, r *http.Request, next http.Handler, st *requestState, route string, hits int64, err error) {
	caller := st.caller
	if r.Context().Err() != nil {
		// The client went away; nobody reads this answer.
		m.metrics.count(route, caller.Plan, "cancelled")
		writeError(w, http.StatusServiceUnavailable, "request_cancelled", "The request was cancelled.")
		return
	}
	m.logStoreFailure(r.Context(), route, err)
	if m.failOpen {
		m.metrics.count(route, caller.Plan, "failed_open")
		m.recordDecision(caller, route, hits, true)
		w.Header().Set(HeaderStoreDegraded, "store-unavailable")
		m.serveNext(w, r, st, route, requestlog.FailedOpen, "", "store-unavailable", nil, next)
		return
	}
	m.metrics.count(route, caller.Plan, "unavailable")
	m.logRefusal(r, caller, route, nil, requestlog.Unavailable, http.StatusServiceUnavailable, "", 1)
	w.Header().Set("Retry-After", "1")
	writeError(w, http.StatusServiceUnavailable, "rate_limit_unavailable",
		"Rate limits cannot be checked right now, so the request was not served; retry shortly.")
}

// writeQueueTooLong answers a queue-mode request whose turn is further away
// than the middleware will hold a connection.
func writeQueueTooLong(w http.ResponseWriter, d enforce.Decision) {
	retry := max(ceilSeconds(d.Delay), 1)
	var limit int64
	var policy string
	if i := d.BindingIndex(); i >= 0 {
		l := &d.Layers[i].Limit
		limit, policy = l.Limit, l.Name
	}
	var msg [96]byte
	m := append(msg[:0], "The queue for this endpoint is too long to wait in. Retry in "...)
	m = strconv.AppendInt(m, retry, 10)
	m = append(m, " s."...)
	writeRejectionBody(w, retry, rejectionBody(retry, limit, policy, m))
}

// firedLayer names the layer a refusal of d waits for ("" for none).
func firedLayer(d enforce.Decision) string {
	if i := d.BindingIndex(); i >= 0 {
		return d.Layers[i].Limit.Name
	}
	return ""
}

// routeLimitsSlots is the size of the table of filtered limit slices: well
// above the plans times routes a control plane serves at once.
const routeLimitsSlots = 1024

// routeLimitsCache remembers applicable's answer and the fixed parts of its
// rate-limit fields per caller limit slice (by identity: the snapshot's slices are
// immutable) and route, in a direct-mapped table, so that a route whose tier
// leaves out some of the plan's limits costs no allocation per request, the
// store sees the same slice every time (its own validation cache then
// holds), and the fields' fixed parts are formatted once. An answer is cached the
// second time in a row it is computed in its slot, so a resolver building
// fresh slices per request costs no more than before.
type routeLimitsCache struct {
	slots [routeLimitsSlots]routeLimitsSlot
}

type routeLimitsSlot struct {
	entry atomic.Pointer[routeLimits]
	// seen is the first limit of the slice last filtered here without
	// being cached; holding it keeps its address from being reused.
	seen atomic.Pointer[enforce.Limit]
}

type routeLimits struct {
	first  *enforce.Limit
	n      int
	route  string
	limits []enforce.Limit
	fixed  *fixedHeaders
	// series are the metrics of the plan whose caller filled the entry;
	// a limit slice belongs to one plan in the control plane's snapshots,
	// and a caller of another plan looks its series up.
	series *planSeries
}

// applicable returns the limits of a caller of plan that apply to route
// and, when it has them cached, the fixed parts of their rate-limit fields
// (else nil) and the route's series of plan (else nil).
func (c *routeLimitsCache) applicable(limits []enforce.Limit, route, plan string, metrics *middlewareMetrics) ([]enforce.Limit, *fixedHeaders, *planSeries) {
	if len(limits) == 0 {
		return nil, nil, nil
	}
	first := &limits[0]
	slot := &c.slots[routeSlot(first, route)]
	if e := slot.entry.Load(); e != nil && e.first == first && e.n == len(limits) && e.route == route {
		series := e.series
		if series.plan != plan {
			series = nil
		}
		return e.limits, e.fixed, series
	}
	out := enforce.Applicable(limits, route)
	if slot.seen.Load() != first {
		slot.seen.Store(first)
		return out, nil, nil
	}
	slot.entry.Store(&routeLimits{first: first, n: len(limits), route: route, limits: out, fixed: newFixedHeaders(out),
		series: metrics.series(route, plan)})
	return out, nil, nil
}

// policyDescribes reports whether the fixed parts of the rate-limit fields
// of limits (newFixedHeaders) also describe layers: same names, limits and
// windows, in order.
func policyDescribes(limits []enforce.Limit, layers []enforce.LayerResult) bool {
	if len(limits) != len(layers) {
		return false
	}
	for i := range limits {
		a, b := &limits[i], &layers[i].Limit
		if a.Limit != b.Limit || a.Window != b.Window || a.Name != b.Name {
			return false
		}
	}
	return true
}

// routeSlot mixes the slice's address with the route's: r.Pattern is the
// registered pattern's own string, the same for every request on a route
// (an unstable one only spreads over more slots; entries compare the route
// itself). Fibonacci hashing spreads the mix over the table.
func routeSlot(first *enforce.Limit, route string) uint64 {
	h := uint64(uintptr(unsafe.Pointer(first))) ^ uint64(uintptr(unsafe.Pointer(unsafe.StringData(route))))*31
	const bits = 10 // log2(routeLimitsSlots)
	return h * 0x9E3779B97F4A7C15 >> (64 - bits)
}

// requestState is what the middleware tells the handler. It is itself the
// handler's context (the request's context plus itself under stateKey). A
// decided request's state also holds the decision's layers and the header
// values (see newDecidedState), so all of them cost a request one
// allocation.
//
// It is not pooled: the handler may keep its context past ServeHTTP (a
// goroutine it started, context.AfterFunc), and net/http writes the header
// values, which point into the state, after the middleware has returned.
type requestState struct {
	context.Context
	caller   enforce.Caller
	decision enforce.Decision
	degraded bool
	// held is the request's concurrency slots, nil when none (see KeepSlots).
	held *heldSlots
}

// decidedState is a requestState with room for a decision of up to n
// layers and its header values. The state is sized to the decision: a
// request of two layers (a plan-wide limit and a route's tier) allocates
// 640 bytes instead of the 1,024 of room for maxInlineLayers, which cut the
// middleware's CPU per request by about 5 % (BenchmarkMiddleware/memory).
type decidedState[L inlineLayers] struct {
	requestState
	layers  L
	headers [limitHeaderCount]string
}

// inlineLayers are the sizes of room for layers a decidedState comes in.
type inlineLayers interface {
	[2]enforce.LayerResult | [enforce.MaxInlineLayers]enforce.LayerResult
}

// stateScratch is where a decision and its headers are written.
type stateScratch struct {
	layers  []enforce.LayerResult // empty, with the state's room as capacity
	headers *[limitHeaderCount]string
}

// newDecidedState returns the state of caller's request to be decided on n
// limits: one allocation, its layers inside it when n fits.
func newDecidedState(caller enforce.Caller, n int) (*requestState, stateScratch) {
	if n <= 2 {
		st := &decidedState[[2]enforce.LayerResult]{requestState: requestState{caller: caller}}
		return &st.requestState, stateScratch{st.layers[:0], &st.headers}
	}
	st := &decidedState[[enforce.MaxInlineLayers]enforce.LayerResult]{requestState: requestState{caller: caller}}
	return &st.requestState, stateScratch{st.layers[:0], &st.headers}
}

type stateKey struct{}

// Value answers stateKey with the state and anything else from the
// request's context.
func (st *requestState) Value(key any) any {
	if _, ok := key.(stateKey); ok {
		return st
	}
	return st.Context.Value(key)
}

// attach returns r carrying st as its context.
func (st *requestState) attach(r *http.Request) *http.Request {
	st.Context = r.Context()
	return r.WithContext(st)
}

func stateFrom(ctx context.Context) *requestState {
	st, _ := ctx.Value(stateKey{}).(*requestState)
	return st
}

// CallerFrom returns the caller the middleware identified for the request
// whose context is ctx; ok is false outside a wrapped handler.
func CallerFrom(ctx context.Context) (enforce.Caller, bool) {
	st := stateFrom(ctx)
	if st == nil {
		return enforce.Caller{}, false
	}
	return st.caller, true
}

// DecisionFrom returns the decision the middleware made for the request whose
// context is ctx. ok is false outside a wrapped handler and when no decision
// was made (no limit applied, or the store failed and the mode is open).
func DecisionFrom(ctx context.Context) (enforce.Decision, bool) {
	st := stateFrom(ctx)
	if st == nil || st.decision.Layers == nil {
		return enforce.Decision{}, false
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

// invalidKeyMessage is the message of every 401 invalid_api_key.
const invalidKeyMessage = "The API key is malformed, unknown, revoked or expired. Send a valid key as \"Authorization: Bearer <key>\" or \"X-API-Key: <key>\", or no key at all for anonymous access."

// logStoreFailure logs a failed decision.
func (m *Middleware) logStoreFailure(ctx context.Context, route string, err error) {
	if errors.Is(err, enforce.ErrCircuitOpen) {
		// The breaker logged the outage once; a line per request would
		// flood the log for as long as it lasts.
		m.log.DebugContext(ctx, "rate-limit store bypassed", "route", route, "fail_open", m.failOpen)
		return
	}
	m.log.WarnContext(ctx, "rate-limit decision failed", "err", err, "route", route, "fail_open", m.failOpen)
}
