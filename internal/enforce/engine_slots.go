package enforce

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// How an ask waits for a slot of a queue-mode concurrency limit: it asks
// again after slotPollMin, doubling up to slotPollMax, jittered so that the
// waiters of one subject do not ask in step. Polling works the same across
// instances sharing a Redis, where no instance hears of another's release.
const (
	slotPollMin = 2 * time.Millisecond
	slotPollMax = 50 * time.Millisecond
)

// decideSlots takes the concurrency limits' slots, waiting up to queueFor
// for those in queue mode, then decides the rate limits. A refused slot
// consumes no rate limit (they are only peeked, for the layers) and a rate
// rejection gives the slots back at once, unless every rejecting layer is
// in degrade mode (the request then runs, reduced, and holds its slots):
// nothing is held or consumed by a refused ask. It returns how long the
// ask waited before it took its slots.
func (e *Engine) decideSlots(ctx context.Context, req Request, queueFor time.Duration, layers []LayerResult) (Decision, *Lease, time.Duration, error) {
	if e.slots == nil {
		return Decision{}, nil, 0, fmt.Errorf("%w: %w", ErrInvalidRequest, ErrSlotsAllow)
	}
	slots, rate := SplitConcurrency(req.Limits)
	sreq, rreq := req, req
	sreq.Limits, rreq.Limits = slots, rate
	lease, sd, waited, err := e.acquireSlots(ctx, sreq, queueFor)
	if err != nil {
		return Decision{}, nil, 0, err
	}
	if e.tally != nil && (!sd.Allowed || len(rate) == 0) {
		// No Allow will count it (the rate layers are only peeked, or
		// there are none): the usage series count it here, once however
		// long it waited.
		e.tally.Tally(req, sd.Allowed)
	}
	if !sd.Allowed {
		return e.refusedSlots(ctx, req, rreq, sd), nil, 0, nil
	}
	if len(rate) == 0 {
		return sd, lease, waited, nil
	}
	var rd Decision
	if e.into != nil {
		rd, err = e.into.AllowInto(ctx, rreq, layers)
	} else {
		rd, err = e.store.Allow(ctx, rreq)
	}
	if err != nil {
		e.release(ctx, lease)
		return Decision{}, nil, 0, err
	}
	d := MergeLayers(req.Limits, sd, rd)
	if !d.Allowed {
		if _, ok := d.Degradable(); !ok {
			// No request runs: give the slots back before answering.
			e.release(ctx, lease)
			return d, nil, 0, nil
		}
	}
	return d, lease, waited, nil
}

// acquireSlots takes sreq's slots. A refusal whose every refusing layer is
// in queue mode asks again, jittered, until queueFor has passed; waited is
// how long it took when it waited and took them.
func (e *Engine) acquireSlots(ctx context.Context, sreq Request, queueFor time.Duration) (lease *Lease, sd Decision, waited time.Duration, err error) {
	var start, deadline time.Time
	poll := slotPollMin
	for {
		lease, sd, err = e.slots.AcquireSlots(ctx, sreq, e.lease)
		if err != nil {
			return nil, Decision{}, 0, err
		}
		if sd.Allowed {
			if !start.IsZero() {
				waited = time.Since(start)
			}
			return lease, sd, waited, nil
		}
		if queueFor <= 0 || !slotsQueue(sd) {
			return nil, sd, 0, nil
		}
		now := time.Now()
		if start.IsZero() {
			start, deadline = now, now.Add(queueFor)
		}
		if !now.Before(deadline) {
			return nil, sd, 0, nil
		}
		wait := min(poll/2+rand.N(poll/2+1), deadline.Sub(now))
		if !Sleep(ctx, wait) {
			return nil, Decision{}, 0, ctx.Err()
		}
		poll = min(poll*2, slotPollMax)
	}
}

// refusedSlots is the decision of an ask refused a slot: the rate layers
// peeked (nothing charged) beside the slot layers. When the peek fails the
// refusal stands on the slot layers alone.
func (e *Engine) refusedSlots(ctx context.Context, req, rreq Request, sd Decision) Decision {
	if len(rreq.Limits) == 0 {
		return sd
	}
	rd, err := e.store.Peek(ctx, rreq)
	if err != nil {
		e.log.DebugContext(ctx, "peeking rate layers of a refused slot", "err", err)
		return sd
	}
	return MergeLayers(req.Limits, sd, rd)
}

// release gives lease's slots back; a failure is logged, the lease then
// runs out by itself.
func (e *Engine) release(ctx context.Context, lease *Lease) {
	if err := lease.Release(context.WithoutCancel(ctx)); err != nil {
		e.log.WarnContext(ctx, "releasing concurrency slots", "err", err)
	}
}

// slotsQueue reports whether every layer that refused sd is in queue
// mode: the ask may wait for a slot.
func slotsQueue(sd Decision) bool {
	queue := false
	for i := range sd.Layers {
		l := &sd.Layers[i]
		if l.Allowed || l.Limit.Mode == ModeShadow {
			continue
		}
		if l.Limit.Mode != ModeQueue {
			return false
		}
		queue = true
	}
	return queue
}

// Sleep waits d or until ctx ends, reporting whether the full wait
// elapsed: a queued request's wait, for the engine and the ways in.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
