package httplimit

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
)

// heldSlots is a request's lease while its handler runs: renewed every
// renewEvery, so a long handler keeps its slots (and puts them back in a
// Redis that restarted empty meanwhile), and released once.
type heldSlots struct {
	m     *Middleware
	ctx   context.Context // the request's, without its cancellation
	mu    sync.Mutex
	lease *enforce.Lease
	timer *time.Timer
	done  bool
}

// hold starts renewing lease (nil: nothing held) until it is released.
func (m *Middleware) hold(ctx context.Context, lease *enforce.Lease) *heldSlots {
	if lease == nil {
		return nil
	}
	hs := &heldSlots{m: m, ctx: context.WithoutCancel(ctx), lease: lease}
	hs.timer = time.AfterFunc(renewEvery(m.lease), hs.renew)
	return hs
}

// renewEvery is how often a held lease is renewed: half the lease, at most
// five seconds, so that after Redis loses its slots (restarted empty) the
// requests still running are counted again within five seconds.
func renewEvery(lease time.Duration) time.Duration {
	return min(lease/2, 5*time.Second)
}

func (hs *heldSlots) renew() {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if hs.done {
		return
	}
	if err := hs.lease.Renew(hs.ctx); err != nil {
		hs.m.log.WarnContext(hs.ctx, "renewing concurrency slots", "err", err)
	}
	hs.timer.Reset(renewEvery(hs.m.lease))
}

// KeepSlots, called by a handler the middleware runs, keeps the request's
// concurrency slots after the handler returns: they are neither released
// nor renewed by the middleware, so they last until the lease runs out or
// until Lease.Release or the store's ReleaseToken with Lease.Token. It is
// for a way in that admits a request it does not serve itself, such as a
// forward-auth check, whose gateway may report completion later. It returns
// nil when the request holds no slot.
func KeepSlots(ctx context.Context) *enforce.Lease {
	st := stateFrom(ctx)
	if st == nil || st.held == nil {
		return nil
	}
	hs := st.held
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if hs.done {
		return nil
	}
	hs.done = true
	hs.timer.Stop()
	return hs.lease
}

// ReleaseToken releases the slots a Lease.Token names, on any instance
// sharing the store (see SlotStore.ReleaseToken).
func (m *Middleware) ReleaseToken(ctx context.Context, token string) error {
	if m.slots == nil {
		return fmt.Errorf("%w: the store holds no concurrency slots", enforce.ErrInvalidRequest)
	}
	return m.slots.ReleaseToken(ctx, token)
}

// release gives the slots back (nil-safe, once). A failure is logged: the
// lease then runs out by itself.
func (hs *heldSlots) release() {
	if hs == nil {
		return
	}
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if hs.done {
		return
	}
	hs.done = true
	hs.timer.Stop()
	if err := hs.lease.Release(hs.ctx); err != nil {
		hs.m.log.WarnContext(hs.ctx, "releasing concurrency slots", "err", err)
	}
}

// HoldsSlots reports whether the request of ctx, which the middleware
// runs, holds concurrency slots until its handler returns.
func HoldsSlots(ctx context.Context) bool {
	st := stateFrom(ctx)
	return st != nil && st.held != nil
}

// WithSlotLease returns m, for the same way in, with concurrency slots that
// last d unless renewed or released: for a way in whose gateway cannot say
// when the request ends (a forward-auth check, the Envoy service), so that
// a developer's finished requests do not hold slots for a whole lease.
// A d of 0 means DefaultSlotLease.
func (m *Middleware) WithSlotLease(d time.Duration) *Middleware {
	c := m.WayIn(m.wayIn)
	mode := enforce.FailClosed
	if m.failOpen {
		mode = enforce.FailOpen
	}
	c.setEngines(mode, d)
	return c
}
