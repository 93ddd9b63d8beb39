package enforce

import (
	"fmt"
	"time"
)

// Precision says how exactly a limit is enforced across the instances that
// share one Redis. The zero value is PrecisionExact, so a limit that does
// not ask keeps one atomic decision in Redis per request.
type Precision string

// The three precisions.
const (
	// PrecisionExact decides every request in Redis, atomically with the
	// request's other exact layers (the default).
	PrecisionExact Precision = "exact"
	// PrecisionLeased decides from a slice of the subject's budget that the
	// instance leased from Redis in one script call, until it is spent or
	// expires; what is left is given back. The worst case is LeaseBounds.
	PrecisionLeased Precision = "leased"
	// PrecisionLocal decides on each instance alone, with the limit divided
	// by the number of instances (PORTAL_INSTANCES): no Redis at all.
	PrecisionLocal Precision = "local"
)

// Precisions lists every precision, in the order the UI and docs show them.
var Precisions = []Precision{PrecisionExact, PrecisionLeased, PrecisionLocal}

// Valid reports whether p is a known precision; "" is (it means exact).
func (p Precision) Valid() bool {
	return p == "" || p == PrecisionExact || p == PrecisionLeased || p == PrecisionLocal
}

// OrExact returns p, or PrecisionExact for "".
func (p Precision) OrExact() Precision {
	if p == "" {
		return PrecisionExact
	}
	return p
}

// LeaseShare is how finely a leased limit is cut: one instance holds at most
// 1/LeaseShare of its share of the limit (Limit / instances) at a time, so
// the leases outstanding on all instances together never exceed
// Limit/LeaseShare, two per cent.
const LeaseShare = 50

// ValidatePrecision refuses a precision a limit cannot have: concurrency
// stays exact (a slot is held, not spent, so there is nothing to lease); a
// leaky bucket that queues stays exact (the queue delay is read from the
// shared state); a quota is always exact (it is billable: every unit goes
// through the quota ledger in Postgres with its decision, and a lease would
// put units in one instance's memory that a crash takes off the bill).
func ValidatePrecision(l Limit) error {
	p := l.Precision.OrExact()
	switch {
	case !l.Precision.Valid():
		return fmt.Errorf("%w: limit %q: unknown precision %q (exact, leased or local)", ErrInvalidRequest, l.Name, l.Precision)
	case p == PrecisionExact:
		return nil
	case l.Algorithm == Concurrency:
		return fmt.Errorf("%w: limit %q: a concurrency limit is always exact", ErrInvalidRequest, l.Name)
	case l.Algorithm == LeakyBucket && l.Mode == ModeQueue:
		return fmt.Errorf("%w: limit %q: a leaky bucket that queues is always exact", ErrInvalidRequest, l.Name)
	case l.Algorithm == Quota:
		return fmt.Errorf("%w: limit %q: a quota is always exact (it is billable, and each unit is recorded with its decision)", ErrInvalidRequest, l.Name)
	}
	return nil
}

// Bounds is a leased or local limit's worst case against an exact one, in
// cost units, with the instances sharing the limit counted.
type Bounds struct {
	// Over is the most the instances together may admit beyond what the
	// exact limit would, at any moment: the leases outstanding that are
	// used after the algorithm has moved past the instant they were taken
	// (a sliding log's entries, a bucket's level). Zero for the windowed
	// algorithms, whose leases end with the window and are counted in it.
	Over int64
	// Under is the most the instances together may admit below the exact
	// limit in one window: leases held unused when a window ends, or by an
	// instance that died (until the algorithm frees them, at the window's
	// end or by refill). Clean give-back returns the rest.
	Under int64
	// Lease is the most one instance holds at a time; 1 or less means the
	// limit is too small to lease and is decided exactly, request by
	// request.
	Lease int64
}

// LeaseBounds states the worst case of l with the given number of
// instances sharing it. For PrecisionExact it is zero. For PrecisionLocal
// each instance enforces Limit/instances of its own: callers that reach
// one instance only get that share (Under is the rest), and Over is the
// rounding up of each share.
func LeaseBounds(l Limit, instances int) Bounds {
	n := int64(max(instances, 1))
	switch l.Precision.OrExact() {
	case PrecisionLocal:
		share := (l.Limit + n - 1) / n
		return Bounds{Over: share*n - l.Limit, Under: l.Limit - share, Lease: 0}
	case PrecisionLeased:
		lease := MaxLease(l, instances)
		if lease <= max(l.Cost, 1) {
			return Bounds{Lease: lease}
		}
		b := Bounds{Under: n * lease, Lease: lease}
		switch l.Algorithm {
		case FixedWindow, SlidingWindowCounter:
		default:
			b.Over = n * lease
		}
		return b
	}
	return Bounds{}
}

// MaxLease is the most one instance may lease of l at a time, in cost
// units: its share of the limit cut LeaseShare ways, never below one
// request's cost.
func MaxLease(l Limit, instances int) int64 {
	n := int64(max(instances, 1))
	return max(l.Limit/(n*LeaseShare), max(l.Cost, 1))
}

// LeaseTTL is how long a lease of l lasts at most: a quarter of the window,
// between 10 ms and one second. (A lease of a fixed window or sliding
// counter also ends with its window, and until then is renewed rather
// than given back; a sliding log's, whose leftover cannot be given back,
// is renewed until its entry leaves the log.)
func LeaseTTL(l Limit) time.Duration {
	return min(max(l.Window/4, 10*time.Millisecond), time.Second)
}

// ShareOf returns l as one of n instances enforces it alone: Limit and
// Burst divided by n, rounded up and at least 1, so that n instances
// deciding alone admit about what the shared store would. A Burst of 0
// keeps its meaning ("Limit", or no queue).
func ShareOf(l Limit, n int64) Limit {
	if n <= 1 {
		return l
	}
	l.Limit = max((l.Limit+n-1)/n, 1)
	if l.Burst > 0 {
		l.Burst = max((l.Burst+n-1)/n, 1)
	}
	return l
}
