package enforce

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Concurrency is the in-flight algorithm: at most Limit requests of a
// subject (or of a key, with PerKey) at once. A request holds one slot of
// each of its concurrency limits from admission until its handler returns;
// Window, Burst and Cost do not apply (one request, one slot). Slots are
// held by a SlotStore, not decided by Store.Allow: every slot is a lease
// that expires unless renewed, so an instance that crashes while holding
// slots leaks them for one lease at most.
const Concurrency Algorithm = "concurrency"

// DefaultSlotLease is how long a concurrency slot is held without renewal
// when MiddlewareOptions.SlotLease is zero. The middleware renews the
// slots of a request that is still running every half lease, so the lease
// bounds only what a crashed instance leaks, never a long handler.
const DefaultSlotLease = 60 * time.Second

// SlotStore holds the slots of concurrency limits. The memory store, the
// Redis store and the failover.Store implement it, beside Store; the
// middleware finds it on its Store.
//
// AcquireSlots takes one slot of every limit of req (all of them
// Concurrency limits) for lease, all or nothing: when any limit not in
// ModeShadow is full, nothing is held, the Lease is nil and the layers say
// which limits refused (RetryAfter a second: a slot frees when a request
// ends, which no one can foresee). A shadow limit that is full refuses
// nothing and holds no slot. The Decision carries one layer per limit, in
// order, and the store's clock reading.
//
// ReleaseToken releases the lease a Lease.Token names, on any instance
// sharing the store: for a way in whose gateway reports completion later,
// in a request of its own. A token of a lease already released or expired
// releases nothing; a malformed one is ErrInvalidRequest.
type SlotStore interface {
	AcquireSlots(ctx context.Context, req Request, Duration time.Duration) (*Lease, Decision, error)
	ReleaseToken(ctx context.Context, token string) error
}

// Lease is the slots one request holds. Release it when the request ends
// (the middleware defers it); Renew it before it runs out to keep the
// slots. Both are safe to call after the lease expired: they then do
// nothing. A Lease is not safe for concurrent use.
type Lease struct {
	Holder SlotHolder
	// kind is the store that holds it, in its token: leaseMemory or
	// leaseRedis.
	Kind     byte
	LeaseID  string
	Keys     []string
	Duration time.Duration
	// expires is the store's clock at acquisition plus the lease: the
	// latest the slots are held unless renewed.
	ExpiresAt time.Time
	released  bool
}

// slotHolder is the store side of a Lease.
type SlotHolder interface {
	ReleaseSlots(ctx context.Context, l *Lease) error
	RenewSlots(ctx context.Context, l *Lease) error
}

// ID names the lease: what a gateway without a completion callback hands
// back to release it early (see the gateway's release endpoint).
func (l *Lease) ID() string { return l.LeaseID }

// Token names the lease and its slots in a string safe for an HTTP header
// (base64url), which SlotStore.ReleaseToken accepts on any instance. It
// reveals the lease's slot names (subject and limit names), nothing secret;
// the lease id in it is random, so no token of another lease can be
// guessed.
func (l *Lease) Token() string {
	b := []byte{l.Kind}
	b = append(b, l.LeaseID...)
	for _, k := range l.Keys {
		b = append(b, '\n')
		b = append(b, k...)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// The kinds of lease, by the store holding them.
const (
	LeaseMemory = 'm'
	LeaseRedis  = 'r'
)

// parseLeaseToken reads a token of Lease.Token.
func ParseLeaseToken(token string) (Kind byte, LeaseID string, Keys []string, err error) {
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil || len(token) > maxLeaseToken || len(b) < 2 {
		return 0, "", nil, fmt.Errorf("%w: malformed lease token", ErrInvalidRequest)
	}
	parts := strings.Split(string(b[1:]), "\n")
	return b[0], parts[0], parts[1:], nil
}

// maxLeaseToken bounds a token's length: a few limits' names.
const maxLeaseToken = 4096

// Expires is when the slots are released anyway unless renewed.
func (l *Lease) Expires() time.Time { return l.ExpiresAt }

// Release frees the lease's slots. Calling it again does nothing.
func (l *Lease) Release(ctx context.Context) error {
	if l == nil || l.released {
		return nil
	}
	l.released = true
	return l.Holder.ReleaseSlots(ctx, l)
}

// Renew extends the lease by its length from now.
func (l *Lease) Renew(ctx context.Context) error {
	if l == nil || l.released {
		return nil
	}
	return l.Holder.RenewSlots(ctx, l)
}

// hasConcurrency reports whether any of limits is a Concurrency limit.
func HasConcurrency(limits []Limit) bool {
	for i := range limits {
		if limits[i].Algorithm == Concurrency {
			return true
		}
	}
	return false
}

// splitConcurrency returns the concurrency limits of limits and the others,
// each in their original order.
func SplitConcurrency(limits []Limit) (slots, rate []Limit) {
	for _, l := range limits {
		if l.Algorithm == Concurrency {
			slots = append(slots, l)
		} else {
			rate = append(rate, l)
		}
	}
	return slots, rate
}

// validateSlots checks a slot request as validateRequest does a decision.
func ValidateSlots(req Request, Duration time.Duration) error {
	if err := ValidateRequest(req); err != nil {
		return err
	}
	if Duration <= 0 {
		return fmt.Errorf("%w: slot lease %s: must be positive", ErrInvalidRequest, Duration)
	}
	for _, l := range req.Limits {
		switch {
		case l.Algorithm != Concurrency:
			return fmt.Errorf("%w: limit %q: %s is not a concurrency limit", ErrInvalidRequest, l.Name, l.Algorithm)
		case l.Limit < 1:
			return fmt.Errorf("%w: limit %q: limit %d below 1", ErrInvalidRequest, l.Name, l.Limit)
		}
	}
	return nil
}

// slotOut is one concurrency layer's result: in flight is the number of
// live leases (this one included when it was taken).
func SlotOut(l Limit, allowed bool, inFlight int64) LayerResult {
	r := LayerResult{Limit: l, Allowed: allowed, Remaining: max(l.Limit-inFlight, 0)}
	if !allowed {
		r.RetryAfter = time.Second
	}
	return r
}

// slotsAdmit says whether slot layers admit a request: every layer not in
// shadow mode has a slot.
func SlotsAdmit(layers []LayerResult) bool {
	for i := range layers {
		if !layers[i].Allowed && layers[i].Limit.Mode != ModeShadow {
			return false
		}
	}
	return true
}

// peekWithSlots is a store's Peek of a request with concurrency limits:
// the rate limits go to peekRate, the slots are counted by peekSlots, and
// the layers are merged back in the request's order.
func PeekWithSlots(ctx context.Context, req Request, peekRate func(context.Context, Request) (Decision, error), peekSlots func(context.Context, Request) (Decision, error)) (Decision, error) {
	slots, rate := SplitConcurrency(req.Limits)
	sreq := req
	sreq.Limits = slots
	sd, err := peekSlots(ctx, sreq)
	if err != nil {
		return Decision{}, err
	}
	if len(rate) == 0 {
		return sd, nil
	}
	rreq := req
	rreq.Limits = rate
	rd, err := peekRate(ctx, rreq)
	if err != nil {
		return Decision{}, err
	}
	return MergeLayers(req.Limits, sd, rd), nil
}

// mergeLayers is the decision of limits made of a slot decision and a rate
// decision: the layers in the order of limits, allowed when both are.
func MergeLayers(limits []Limit, slots, rate Decision) Decision {
	d := rate
	d.Allowed = slots.Allowed && rate.Allowed
	d.Local = slots.Local || rate.Local
	if d.At.IsZero() {
		d.At = slots.At
	}
	d.Layers = make([]LayerResult, 0, len(limits))
	si, ri := 0, 0
	for _, l := range limits {
		if l.Algorithm == Concurrency {
			if si < len(slots.Layers) {
				d.Layers = append(d.Layers, slots.Layers[si])
			}
			si++
		} else {
			if ri < len(rate.Layers) {
				d.Layers = append(d.Layers, rate.Layers[ri])
			}
			ri++
		}
	}
	return d
}

// errSlotsAllow is what Store.Allow says of a concurrency limit.
var ErrSlotsAllow = errors.New("concurrency limits hold slots: acquire them with AcquireSlots")
