package enforce

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// CountWhen says which responses a limit's Cost counts for.
type CountWhen string

// The values of Limit.CountWhen, as stored in Postgres and accepted by the
// admin API and plan files.
const (
	// CountAlways counts every admitted request (the default).
	CountAlways CountWhen = "always"
	// CountSuccess counts a request whose response is 1xx-3xx: a 4xx or
	// 5xx response gives its Cost back.
	CountSuccess CountWhen = "success"
	// CountError counts a request whose response is 4xx or 5xx: a 1xx-3xx
	// response gives its Cost back.
	CountError CountWhen = "error"
)

// CountWhens lists every value, in the order forms offer them.
var CountWhens = []CountWhen{CountAlways, CountSuccess, CountError}

// Valid reports whether c is a known value ("" is CountAlways).
func (c CountWhen) Valid() bool {
	return c == "" || c == CountAlways || c == CountSuccess || c == CountError
}

// Settles reports whether any of limits is settled after the response: it
// counts only some responses, or takes its cost from a response header.
func Settles(limits []Limit) bool {
	for i := range limits {
		if l := &limits[i]; (l.CountWhen != "" && l.CountWhen != CountAlways) || l.CostHeader != "" {
			return true
		}
	}
	return false
}

// Settlement is what the response of an admitted request changes in the
// limits it was charged on: Refund gives units back (each limit's Cost is
// the units), Charge adds units (likewise). Either may be empty.
type Settlement struct {
	Refund, Charge []Limit
}

// Settle works out the settlement of an admitted request charged on limits
// (with their costs as charged, hits included), whose protected API
// answered status, header giving the response's header values by name.
// Only a response of the protected API settles anything: Sluice's own
// refusals consumed nothing.
//
//   - CountSuccess: a status of 400 or more gives the whole Cost back;
//   - CountError: a status below 400 gives the whole Cost back;
//   - CostHeader: a whole number n >= 0 in that header is what the request
//     cost: n - Cost is charged when positive, given back when negative; a
//     missing or malformed value leaves the Cost as charged. A request the
//     CountWhen gives back is not charged from its header either.
//
// A shadow limit settles like any other: it consumed like any other.
func Settle(limits []Limit, status int, header func(name string) string) Settlement {
	var s Settlement
	for i := range limits {
		l := limits[i]
		cost := max(l.Cost, 1)
		switch {
		case l.CountWhen == CountSuccess && status >= 400, l.CountWhen == CountError && status < 400:
			l.Cost = cost
			s.Refund = append(s.Refund, l)
			continue
		}
		if l.CostHeader == "" {
			continue
		}
		actual, err := strconv.ParseInt(header(l.CostHeader), 10, 64)
		if err != nil || actual < 0 {
			continue
		}
		switch {
		case actual > cost:
			l.Cost = actual - cost
			s.Charge = append(s.Charge, l)
		case actual < cost:
			l.Cost = cost - actual
			s.Refund = append(s.Refund, l)
		}
	}
	return s
}

// Charger is a Store that counts consumption past its limits: each limit's
// Cost units are spent whatever remains, so a count may exceed its limit
// and a bucket go into debt (later requests wait for the refill to pay it
// off). It settles a request that cost more than it was charged.
type Charger interface {
	Charge(ctx context.Context, req Request) error
}

// Apply carries s out on store for req (its subject, key and anchor; its
// limits are s's), decided at the Decision.At at. A store that cannot
// refund or charge returns an error naming what it could not do.
func (s Settlement) Apply(ctx context.Context, store Store, req Request, at time.Time) error {
	if len(s.Refund) > 0 {
		r, ok := store.(Refunder)
		if !ok {
			return fmt.Errorf("settle: the store gives nothing back (%T)", store)
		}
		req.Limits = s.Refund
		if err := r.Refund(ctx, req, at); err != nil {
			return fmt.Errorf("settle: refund: %w", err)
		}
	}
	if len(s.Charge) > 0 {
		c, ok := store.(Charger)
		if !ok {
			return fmt.Errorf("settle: the store charges nothing after a decision (%T)", store)
		}
		req.Limits = s.Charge
		if err := c.Charge(ctx, req); err != nil {
			return fmt.Errorf("settle: charge: %w", err)
		}
	}
	return nil
}

// chargeCeiling is a limit no state reaches: a charge evaluates each
// algorithm against it, so the units are spent whatever remains
// (scripts/decide.lua's mode 'f' raises the same figures).
const chargeCeiling = 1e15

// ChargeState returns s, a state of p at now (µs), with p.Cost units spent
// past the limit, by the algorithm's own arithmetic: a window's count (or
// a quota's, anchor in µs) grows by the cost, a bucket's virtual finish
// time moves on by cost intervals. ok is false for a sliding log, whose
// entries are not charged after the fact.
func ChargeState(s CounterState, p Params, now, anchor int64) (next CounterState, ok bool) {
	var out LayerOut
	switch p.Kind {
	case KindFixedWindow:
		p.Limit = chargeCeiling
		EvalFixedWindow(&s, &p, now, true, &next, &out)
	case KindSlidingCounter:
		p.Limit = chargeCeiling
		EvalSlidingCounter(&s, &p, now, true, &next, &out)
	case KindTokenBucket:
		p.Tolerance = chargeCeiling
		EvalTokenBucket(&s, &p, now, true, &next, &out)
	case KindLeakyBucket:
		p.Tolerance = chargeCeiling
		EvalLeakyBucket(&s, &p, now, true, &next, &out)
	case KindQuota:
		p.Limit = chargeCeiling
		EvalQuota(&s, &p, now, anchor, true, &next, &out)
	default:
		return s, false
	}
	return next, true
}
