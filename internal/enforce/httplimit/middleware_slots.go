package httplimit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
)

// How a queue-mode concurrency limit waits for a slot: it asks again
// after slotPollMin, doubling up to slotPollMax (jittered, so that the
// waiters of one subject do not ask in step). Polling works the same
// across instances sharing a Redis, where no instance hears of another's
// release.
const (
	slotPollMin = 2 * time.Millisecond
	slotPollMax = 50 * time.Millisecond
)

// decideHeld decides a request with concurrency limits: their slots first,
// then the rate limits in one Store decision. A refused slot charges no
// rate limit (the rate layers are only peeked, for the headers); a request
// the rate limits reject gives its slots back at once; so nothing is held
// or consumed by a rejected request, as with any other layer. A refused
// slot of a queue-mode limit is asked for again until MaxQueueWait has
// passed; the wait is marked with HeaderQueueDelay. The returned slots,
// nil when none are held, are released by the caller when the handler
// returns (nil-safe).
func (m *Middleware) decideHeld(ctx context.Context, h http.Header, req enforce.Request, layers []enforce.LayerResult) (enforce.Decision, *heldSlots, error) {
	slots, rate := enforce.SplitConcurrency(req.Limits)
	sreq, rreq := req, req
	sreq.Limits, rreq.Limits = slots, rate

	var start, deadline time.Time
	poll := slotPollMin
	for {
		lease, sd, err := m.slots.AcquireSlots(ctx, sreq, m.lease)
		if err != nil {
			return enforce.Decision{}, nil, err
		}
		if sd.Allowed {
			if !start.IsZero() {
				h.Set(HeaderQueueDelay, strconv.FormatInt(time.Since(start).Milliseconds(), 10))
			}
			return m.decideRate(ctx, req, rreq, sd, lease, layers)
		}
		if !slotQueues(sd) {
			return m.refusedSlots(ctx, req, rreq, sd), nil, nil
		}
		now := time.Now()
		if start.IsZero() {
			start, deadline = now, now.Add(m.maxWait)
		}
		if !now.Before(deadline) {
			return m.refusedSlots(ctx, req, rreq, sd), nil, nil
		}
		wait := min(poll/2+rand.N(poll/2+1), deadline.Sub(now))
		if !sleep(ctx, wait) {
			return enforce.Decision{}, nil, ctx.Err()
		}
		poll = min(poll*2, slotPollMax)
	}
}

// decideRate decides the rate limits of a request whose slots are held.
func (m *Middleware) decideRate(ctx context.Context, req, rreq enforce.Request, sd enforce.Decision, lease *enforce.Lease, layers []enforce.LayerResult) (enforce.Decision, *heldSlots, error) {
	held := m.hold(ctx, lease)
	if len(rreq.Limits) == 0 {
		// No Allow ran to count it: the usage series count it here.
		m.tallyIn(req, true)
		return sd, held, nil
	}
	rd, err := m.allow(ctx, rreq, layers)
	if err != nil {
		held.release()
		return enforce.Decision{}, nil, err
	}
	d := enforce.MergeLayers(req.Limits, sd, rd)
	if !d.Allowed {
		if _, degrade := degradable(d); !degrade {
			// No handler runs: give the slots back before answering.
			held.release()
			return d, nil, nil
		}
	}
	return d, held, nil
}

// refusedSlots is the decision of a request refused a slot: the rate
// layers peeked (nothing charged) beside the slot layers.
func (m *Middleware) refusedSlots(ctx context.Context, req, rreq enforce.Request, sd enforce.Decision) enforce.Decision {
	// Only peeks ran: the usage series (live counters, history) count the
	// refusal here, as Allow counts a rate layer's.
	m.tallyIn(req, false)
	if len(rreq.Limits) == 0 {
		return sd
	}
	rd, err := m.store.Peek(ctx, rreq)
	if err != nil {
		// The refusal stands; the headers then list the slot layers only.
		m.log.DebugContext(ctx, "peeking rate layers of a refused slot", "err", err)
		return sd
	}
	rd.Allowed = false
	return enforce.MergeLayers(req.Limits, sd, rd)
}

// tallyIn counts a decision the store's Allow did not in its usage series.
func (m *Middleware) tallyIn(req enforce.Request, allowed bool) {
	if m.tally != nil {
		m.tally.Tally(req, allowed)
	}
}

// slotQueues reports whether every layer that refused sd is in queue mode:
// the request may wait for a slot.
func slotQueues(sd enforce.Decision) bool {
	queue := false
	for i := range sd.Layers {
		l := &sd.Layers[i]
		if l.Allowed || l.Limit.Mode == enforce.ModeShadow {
			continue
		}
		if l.Limit.Mode != enforce.ModeQueue {
			return false
		}
		queue = true
	}
	return queue
}

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
