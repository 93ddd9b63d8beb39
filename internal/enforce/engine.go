package enforce

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"
)

// Ask is one question a way in puts to the engine: may this caller make
// this request now?
type Ask struct {
	// Caller is who asks, resolved by the way in from a key or an address;
	// its Limits are filtered by Route.
	Caller Caller
	// Route is the matched ServeMux pattern, e.g. "GET /api/items/{id}";
	// "" applies only the plan-wide limits.
	Route string
	// Hits is how many requests the ask counts for (an Envoy request's
	// hits_addend): every limit's cost is multiplied by it. Below 1 counts
	// as 1.
	Hits int64
	// Peek evaluates the limits without consuming anything and holds no
	// concurrency slot.
	Peek bool
	// AllRoutes, with Peek, evaluates every one of the caller's limits
	// whatever their Route, for a caller's whole picture (the key
	// verification API asked about no route); Route then only labels it.
	AllRoutes bool
	// QueueFor is the longest the ask may wait for a slot of its
	// concurrency limits in ModeQueue; 0 does not wait. An ask whose every
	// refusing slot queues asks for them again, every 2 ms doubling to
	// 50 ms (jittered), until it takes them or QueueFor has passed; the
	// rate limits are decided once, after, and the usage series count the
	// ask once. Outcome.SlotWait says how long it waited. A way in sets it
	// to how long it will hold its request open; ctx ending stops the wait
	// with ctx's error.
	QueueFor time.Duration
}

// Degradation says why an Outcome is not the shared store's own answer.
type Degradation string

// The degradations, as the HeaderStoreDegraded values the ways in send.
const (
	// NotDegraded is the shared store's answer.
	NotDegraded Degradation = ""
	// DegradedLocal: the local store decided while the shared one was
	// unreachable (each limit divided by the instance count).
	DegradedLocal Degradation = "local"
	// DegradedRegionShare: a region decided on its own share of each limit.
	DegradedRegionShare Degradation = "region-share"
	// DegradedStoreUnavailable: no store could decide and the failure mode
	// is open, so the ask was admitted without a decision.
	DegradedStoreUnavailable Degradation = "store-unavailable"
)

// Outcome is the engine's answer to an Ask: everything a way in renders,
// whatever its protocol (headers and JSON bodies, gRPC fields).
type Outcome struct {
	// Decision holds every layer's limit, remaining, reset and retry-after,
	// the queue delay and the store's clock reading. Its Layers are empty
	// when no limit applies to the route, or when the ask was admitted
	// without a decision (DegradedStoreUnavailable).
	Decision
	// Limits are the limits decided: the caller's that apply to the route,
	// their costs multiplied by the ask's hits.
	Limits []Limit
	// Degraded says why the answer is not the shared store's own.
	Degraded Degradation
	// Lease holds the ask's concurrency slots when it has concurrency
	// limits and its request runs: it was admitted, or rejected by
	// degrade-mode layers only (Decision.Degradable), whose request is
	// served reduced. The way in releases it when the request ends (a nil
	// Lease releases nothing).
	Lease *Lease
	// SlotWait is how long the ask waited for its concurrency slots
	// (Ask.QueueFor) before it took them; 0 when it took them at once or
	// was refused. It is not Decision.Delay, the leaky bucket's wait still
	// ahead of an admitted request.
	SlotWait time.Duration
}

// Fired returns the layer that fired (a rejection's longest wait) or, when
// admitted, the one nearest its limit; ok is false when no layer binds.
// Shadow layers never fire.
func (o Outcome) Fired() (LayerResult, bool) {
	if i := o.BindingIndex(); i >= 0 {
		return o.Layers[i], true
	}
	return LayerResult{}, false
}

// EngineOptions configures NewEngine.
type EngineOptions struct {
	// FailureMode says what an ask gets when the store fails: FailOpen
	// admits it (DegradedStoreUnavailable); anything else returns the
	// error. FailLocal is carried out by a failover store.
	FailureMode FailureMode
	// SlotLease is how long a concurrency slot is held without renewal
	// (0 means DefaultSlotLease).
	SlotLease time.Duration
	// Logger receives what the engine works around rather than returns:
	// slots it failed to give back (their lease then runs out), rate
	// layers it could not peek beside a refused slot. Nil discards them.
	Logger *slog.Logger
}

// Engine decides asks over one Store. It is the one entry point every way
// in calls, so all of them get the same limits, the same failure-mode
// handling and the same degraded semantics. Safe for concurrent use.
type Engine struct {
	store    Store
	into     LayersAllower
	slots    SlotStore
	tally    Tallier
	failOpen bool
	lease    time.Duration
	log      *slog.Logger
}

// NewEngine returns an Engine deciding with store.
func NewEngine(store Store, opts EngineOptions) *Engine {
	e := &Engine{store: store, failOpen: opts.FailureMode == FailOpen, lease: cmp.Or(opts.SlotLease, DefaultSlotLease), log: opts.Logger}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	e.into, _ = store.(LayersAllower)
	e.slots, _ = store.(SlotStore)
	e.tally = TallyOf(store)
	return e
}

// Store returns the store the engine decides with.
func (e *Engine) Store() Store { return e.store }

// Decide answers ask. An error means no answer could be given: the store
// failed and the failure mode is not open (the error wraps the store's,
// usually ErrStoreUnavailable), the ask was invalid (ErrInvalidRequest), or
// ctx ended.
func (e *Engine) Decide(ctx context.Context, ask Ask) (Outcome, error) {
	return e.DecideInto(ctx, ask, nil)
}

// DecideInto is Decide writing the layers into layers' backing array when
// the store can and it is large enough, sparing an allocation.
func (e *Engine) DecideInto(ctx context.Context, ask Ask, layers []LayerResult) (Outcome, error) {
	limits := Applicable(ask.Caller.Limits, ask.Route)
	if ask.AllRoutes && ask.Peek {
		limits = ask.Caller.Limits
	}
	if ask.Hits > 1 && len(limits) > 0 {
		limits = WithHits(limits, ask.Hits)
	}
	out := Outcome{Limits: limits}
	if len(limits) == 0 {
		out.Allowed = true
		return out, nil
	}
	req := Request{Subject: ask.Caller.Subject, Key: ask.Caller.Key, Route: ask.Route, Limits: limits, Anchor: ask.Caller.Anchor}
	var d Decision
	var err error
	switch {
	case ask.Peek:
		d, err = e.store.Peek(ctx, req)
	case HasConcurrency(limits):
		d, out.Lease, out.SlotWait, err = e.decideSlots(ctx, req, ask.QueueFor, layers)
	case e.into != nil:
		d, err = e.into.AllowInto(ctx, req, layers)
	default:
		d, err = e.store.Allow(ctx, req)
	}
	if err != nil {
		if ctx.Err() == nil && e.failOpen && !errors.Is(err, ErrInvalidRequest) {
			out.Allowed, out.Degraded = true, DegradedStoreUnavailable
			return out, nil
		}
		return Outcome{}, err
	}
	out.Decision = d
	switch {
	case d.Local:
		out.Degraded = DegradedLocal
	case d.RegionShare:
		out.Degraded = DegradedRegionShare
	}
	return out, nil
}

// Applicable returns the limits that apply to route: plan-wide ones and the
// route's own tiers, in their original order. It returns limits itself when
// all apply, sparing an allocation.
func Applicable(limits []Limit, route string) []Limit {
	n := 0
	for i := range limits {
		if l := &limits[i]; l.Route == "" || l.Route == route {
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

// WithHits returns a copy of limits each costing hits times its cost (the
// policy they advertise is unchanged: same names, quotas and windows).
func WithHits(limits []Limit, hits int64) []Limit {
	out := slices.Clone(limits)
	for i := range out {
		out[i].Cost = max(out[i].Cost, 1) * hits
	}
	return out
}
