package leased

import (
	"context"
	"errors"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
)

// giveBack is units of a lease going back to the shared store.
type giveBack struct {
	req enforce.Request
	at  time.Time
}

// sweepEvery is how often expired leases are given back and failed
// give-backs retried.
const sweepEvery = 250 * time.Millisecond

// giveBack queues units of e's lease granted at `at` for the worker; e.mu
// is held.
func (s *Store) giveBack(e *lease, units int64, at time.Time) {
	s.queue(s.backOf(e, units, at))
}

// backOf is units of e's lease granted at `at`, as a give-back.
func (s *Store) backOf(e *lease, units int64, at time.Time) giveBack {
	l := e.limit
	l.Cost = units
	return giveBack{req: enforce.Request{Subject: e.key.subject, Key: e.subKey, Anchor: e.anchor, Limits: []enforce.Limit{l}}, at: at}
}

// queue hands g to the worker.
func (s *Store) queue(g giveBack) {
	s.backMu.Lock()
	s.pending = append(s.pending, g)
	s.backMu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// run gives back what is queued, and every sweepEvery retires the leases
// that expired unused and forgets the idle ones.
func (s *Store) run() {
	defer close(s.done)
	tick := time.NewTicker(sweepEvery)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			s.flush()
			return
		case <-s.wake:
		case <-tick.C:
			s.sweep(s.now())
		}
		s.flush()
	}
}

// flush sends the queued give-backs; those the store refuses for being
// down are kept for the next try, in order.
func (s *Store) flush() {
	s.backMu.Lock()
	batch := s.pending
	s.pending = nil
	s.backMu.Unlock()
	var keep []giveBack
	for i, g := range batch {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := s.taker.Refund(ctx, g.req, g.at)
		cancel()
		switch {
		case err == nil || errors.Is(err, enforce.ErrNotRefundable):
			if err == nil {
				s.stats.GivenBack.Add(g.req.Limits[0].Cost)
			}
		case errors.Is(err, enforce.ErrInvalidRequest):
			s.log.Warn("lease give-back refused", "limit", g.req.Limits[0].Name, "err", err)
		default:
			// Down: keep this one and the rest for the next sweep.
			keep = append(keep, batch[i:]...)
			s.log.Debug("lease give-back kept for a store that is down", "pending", len(keep), "err", err)
		}
		if keep != nil {
			break
		}
	}
	if keep != nil {
		s.backMu.Lock()
		s.pending = append(keep, s.pending...)
		s.backMu.Unlock()
	}
}

// idleFor is how long a lease with nothing held is kept before it is
// forgotten (its size adapts from its last rate meanwhile).
const idleFor = time.Minute

// sweep gives back what the leases that expired still hold, so that a
// subject that stopped calling does not keep its units from the others; a
// sliding log's lease, whose units cannot go back, is kept until its entry
// leaves the log. Each lease's units are given back under its lock and
// waited for (returnNow): a request here that finds it spent takes its next
// lease after them, so an instance never holds a lease while the units of
// its last are still on their way (they would be withheld from every
// instance, on top of the leases). Once the store fails, the rest are
// queued for flush.
func (s *Store) sweep(now time.Time) {
	var expired []*lease
	for subject, v := range s.leases.Range {
		sl := v.(*subjectLeases)
		sl.mu.Lock()
		var list, kept []*lease
		if p := sl.list.Load(); p != nil {
			list = *p
		}
		for _, e := range list {
			if !e.mu.TryLock() {
				kept = append(kept, e)
				continue
			}
			if e.expiredAt(now) {
				if e.units > 0 {
					expired = append(expired, e)
				} else if now.Sub(e.since) > idleFor && now.After(e.refusedUntil) {
					e.dead = true
				}
			}
			if !e.dead {
				kept = append(kept, e)
			}
			e.mu.Unlock()
		}
		if len(kept) != len(list) {
			sl.list.Store(&kept)
		}
		if len(kept) == 0 {
			sl.dead = true
			s.leases.CompareAndDelete(subject, sl)
		}
		sl.mu.Unlock()
	}
	up := true
	for _, e := range expired {
		e.mu.Lock()
		if e.expiredAt(now) && e.units > 0 {
			if up && now.UnixNano() >= s.down.Load() {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				up = s.returnNow(ctx, e)
				cancel()
			}
			s.retire(e)
		}
		e.mu.Unlock()
	}
}

// expiredAt reports whether e's lease can no longer be spent from at now:
// past its lifetime, and a sliding log's past its entry's window too.
func (e *lease) expiredAt(now time.Time) bool {
	return !now.Before(e.expires) && !(e.keeps() && now.Before(e.windowEnd))
}
