package enforce

import (
	"context"
	"errors"
	"math"
	"time"
)

// Refunder is a Store that gives back units a decision consumed: a lease's
// unused part, or a request whose cost is settled lower after its response.
//
// Refund gives back, for each of req's limits, its Cost units consumed by a
// decision the store made at `at` (the Decision.At it returned). The rule
// per algorithm is RefundState's: a fixed window, sliding counter or quota
// only while its state is still of the window or period `at` fell in, a
// bucket never past full; a sliding log is not refunded (ErrNotRefundable,
// after the other limits are). Nothing is given back that was not taken:
// a count never goes below zero through a refund.
type Refunder interface {
	Refund(ctx context.Context, req Request, at time.Time) error
}

// ErrNotRefundable is returned (wrapped) by Refund for a sliding log: its
// entries are requests in time order, and taking units off the newest would
// move them in time. Its units leave the window as it slides.
var ErrNotRefundable = errors.New("sliding log units are not refunded")

// RefundID is what a refund of p for a decision at `at` (µs) compares with
// the state's index: the window index of a fixed window or sliding counter,
// the period's start of a quota (anchor in µs); buckets need none (0).
func RefundID(p *Params, at, anchor int64) int64 {
	switch p.Kind {
	case KindFixedWindow, KindSlidingCounter:
		return at / p.Window
	case KindQuota:
		start, _ := PeriodBounds(p.Period, at, anchor)
		return start
	}
	return 0
}

// RefundState returns s, a state of p, with units given back for a
// decision whose RefundID is id, at now (µs); ok is false when nothing
// changes. It is the rule both stores run (scripts/refund.lua mirrors it):
//   - fixed window and quota: the count, while the state is of window or
//     period id;
//   - sliding counter: the current count while the state is of window id,
//     the previous one when the state has moved one window on;
//   - token and leaky bucket: the virtual finish time moves back by
//     units*interval, never before now (a full bucket stays full).
//
// A count goes no lower than zero (or than itself, when a grant had already
// taken it below zero).
func RefundState(s CounterState, p *Params, units, id, now int64) (CounterState, bool) {
	if !s.Has || units <= 0 {
		return s, false
	}
	floor := func(c int64) int64 { return max(c-units, min(c, 0)) }
	switch p.Kind {
	case KindFixedWindow, KindQuota:
		if s.Idx != id {
			return s, false
		}
		s.Count = floor(s.Count)
	case KindSlidingCounter:
		switch s.Idx {
		case id:
			s.Count = floor(s.Count)
		case id + 1:
			s.Prev = floor(s.Prev)
		default:
			return s, false
		}
	case KindTokenBucket, KindLeakyBucket:
		tat := s.Tat()
		if tat <= float64(now) {
			return s, false
		}
		return BucketState(math.Max(tat-float64(units)*p.Interval, float64(now))), true
	default:
		return s, false
	}
	return s, true
}
