// Package enforce is the core of Sluice's enforcement engine: the vocabulary
// (Limit, Request, Decision, Store, Caller, FailureMode), the algorithms'
// arithmetic both stores run, and Engine.Decide, the one entry point every
// way in calls. It knows no transport: the stores live in memstore and
// redisstore, the HTTP middleware in httplimit.
package enforce

import (
	"context"
	"errors"
	"time"
)

// Algorithm names a rate-limit algorithm. The string values are the ones stored
// in Postgres and accepted by the admin API.
type Algorithm string

// The five algorithms. DESIGN.md gives their semantics; both stores implement
// each one identically.
const (
	FixedWindow          Algorithm = "fixed_window"
	SlidingWindowLog     Algorithm = "sliding_window_log"
	SlidingWindowCounter Algorithm = "sliding_window_counter"
	TokenBucket          Algorithm = "token_bucket"
	LeakyBucket          Algorithm = "leaky_bucket"
)

// Algorithms lists every algorithm, in the order the UI and docs show them.
var Algorithms = []Algorithm{FixedWindow, SlidingWindowLog, SlidingWindowCounter, TokenBucket, LeakyBucket, Quota, Concurrency}

// RateAlgorithms are the five algorithms that limit a rate over a Window
// (every algorithm but the calendar Quota): what a side-by-side comparison
// of one tier under each algorithm runs.
var RateAlgorithms = Algorithms[:5]

// Valid reports whether a is one of the five algorithms.
func (a Algorithm) Valid() bool {
	for _, known := range Algorithms {
		if a == known {
			return true
		}
	}
	return false
}

// Mode says what happens to a request over a limit.
type Mode string

const (
	// ModeReject answers 429 Too Many Requests.
	ModeReject Mode = "reject"
	// ModeQueue makes the request wait its turn (leaky bucket shaping); for an
	// asynchronous endpoint the handler answers 202 with a job URL.
	ModeQueue Mode = "queue"
	// ModeDegrade lets the handler serve a reduced or cached answer, marked in
	// a response header.
	ModeDegrade Mode = "degrade"
	// ModeShadow tries a limit in the dark: it is decided and consumes on
	// every admitted request like any other layer (all or nothing), but it
	// never rejects a request and is never shown to the client; the
	// middleware counts what it would have rejected.
	ModeShadow Mode = "shadow"
)

// Modes lists every mode.
var Modes = []Mode{ModeReject, ModeQueue, ModeDegrade, ModeShadow}

// Valid reports whether m is a known mode.
func (m Mode) Valid() bool {
	return m == ModeReject || m == ModeQueue || m == ModeDegrade || m == ModeShadow
}

// Limit is one layer of rate limiting: how many units of cost a subject may
// spend per Window, under one algorithm.
type Limit struct {
	// Name identifies the limit in the RateLimit-Policy header (e.g.
	// "pro-search") and names its counters; unique among the limits of one
	// decision.
	Name      string
	Algorithm Algorithm
	// Limit is the number of cost units admitted per Window (the refill or
	// leak rate for the bucket algorithms is Limit/Window).
	Limit  int64
	Window time.Duration
	// Burst is the bucket capacity for token_bucket (0 means Limit) and the
	// queue depth in requests for leaky_bucket (0 means no queueing beyond the
	// steady rate). Other algorithms ignore it.
	Burst int64
	// Cost is what one request spends (0 means 1).
	Cost int64
	// CountWhen says which responses the Cost counts for ("" means
	// CountAlways): the request is decided and charged up front, and a
	// response of the other kind gives the Cost back when it is known
	// (see Settle).
	CountWhen CountWhen
	// CostHeader names a response header whose whole-number value is what
	// the request really cost ("" for none): the Cost is charged up front
	// and the difference settled when the response is known (see Settle).
	CostHeader string
	// Mode is what happens over the limit ("" means ModeReject).
	Mode Mode
	// Period is a Quota's renewal period; Window is then ignored.
	Period Period
	// Route is the ServeMux pattern this limit applies to, e.g.
	// "GET /api/items/{id}"; "" applies to every request (a plan-wide limit).
	// The stores ignore it; the middleware filters on it.
	Route string
	// PerKey keeps the limit's state per API key (Request.Key) inside the
	// subject, instead of one state for the whole subject: a developer's
	// keys share the subject "dev:<user id>" and its plan-wide limits,
	// while a key's per-endpoint tiers and its own overrides count for that
	// key alone. Both kinds of state live under the subject's one hash tag,
	// so one decision still covers them atomically. With Request.Key empty
	// (an anonymous caller) it makes no difference.
	PerKey bool
	// Precision is how exactly the limit is enforced across instances
	// ("" means PrecisionExact); see ValidatePrecision for what each
	// algorithm may have, LeaseBounds for the worst case.
	Precision Precision
}

// ErrStoreUnavailable is returned (wrapped) by a store that cannot reach its
// backend; the failure-mode policy decides what the request gets.
var ErrStoreUnavailable = errors.New("rate-limit store unavailable")

// Store keeps the state of every limit and makes atomic decisions over it.
//
// Allow checks and consumes every limit of one request in one atomic step:
// all or nothing, so a request rejected by one limit consumes nothing from the
// others. Peek evaluates the same limits without consuming anything.
// All state of one subject lives under one Redis Cluster hash tag.
type Store interface {
	Allow(ctx context.Context, req Request) (Decision, error)
	Peek(ctx context.Context, req Request) (Decision, error)
}

// Request is one decision's input.
type Request struct {
	// Subject identifies who is limited and names the hash tag of every
	// counter of the decision: "dev:<user id>" for a developer's API keys
	// (all of them share it), "ip:<address or block>" for an anonymous
	// caller.
	Subject string
	// Key tells a developer's keys apart inside Subject, e.g. "key:42": the
	// limits marked PerKey keep one state per Key. Empty for anonymous
	// callers.
	Key string
	// Route is the matched ServeMux pattern; it labels usage statistics.
	Route  string
	Limits []Limit
	// Anchor is the subject's billing anchor, when its quotas renew (see
	// Quota): a developer's sign-up instant unless an operator set another.
	// The zero Time anchors at the Unix epoch: midnight UTC, the 1st.
	Anchor time.Time
}

// Decision is the outcome of Allow or Peek.
type Decision struct {
	// Allowed is true when every limit admitted the request, shadow limits
	// (ModeShadow) aside: their layers say what they would have done.
	Allowed bool
	// Layers holds one result per limit of the request, in the same order.
	Layers []LayerResult
	// Delay is how long an admitted request must wait before it proceeds
	// (a leaky bucket in queue mode); zero otherwise.
	Delay time.Duration
	// At is the store's clock reading the decision was made at (the memory
	// store's clock, Redis's TIME), to the microsecond. The layers'
	// ResetAfter and RetryAfter count from it, so At.Add(ResetAfter) is the
	// exact reset instant whatever time the caller reads its own clock. The
	// zero Time means the store did not say; callers then use their clock.
	At time.Time
	// Local is true when a failover.Store's local store decided because the
	// shared store was unreachable: the layers describe the local figures
	// (each limit divided by the instance count), and the middleware marks
	// the response with HeaderStoreDegraded "local".
	Local bool
	// RegionShare is true when a region in sync mode decided on its own
	// share of each limit because a peer region is unreachable (or the
	// subject's consumption could not wait for publication): the layers
	// describe the share, and the middleware marks the response with
	// HeaderStoreDegraded "region-share".
	RegionShare bool
}

// LayerResult is one limit's part of a Decision.
type LayerResult struct {
	Limit     Limit
	Allowed   bool
	Remaining int64
	// ResetAfter is how long until the limit is fully available again (the
	// window ends, the bucket refills).
	ResetAfter time.Duration
	// RetryAfter is how long until a rejected request could be admitted;
	// zero when Allowed.
	RetryAfter time.Duration
	// Period is, for a Quota, the length of the period the decision fell
	// in (the RateLimit-Policy w: months and years vary); zero otherwise.
	Period time.Duration
}

// layersAllower is a Store that can write a decision's layers into a slice
// the caller provides (memstore.Store.AllowInto), sparing an allocation.
type LayersAllower interface {
	AllowInto(ctx context.Context, req Request, layers []LayerResult) (Decision, error)
}
