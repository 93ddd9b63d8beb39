package leased

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
)

// leaseKey names one lease: a limit of a subject, or of one of its keys
// for a PerKey limit.
type leaseKey struct {
	subject, scope, name string
}

// lease is the part of one limit's budget this instance holds.
type lease struct {
	mu     sync.Mutex
	key    leaseKey
	limit  enforce.Limit // as leased, its Cost cleared: the figures
	anchor time.Time
	subKey string // the request's Key, for the give-back of a PerKey limit

	units   int64     // left to spend
	granted time.Time // the shared store's clock at the grant: Refund's at
	expires time.Time // this instance's clock
	// windowEnd is when the window a fixed window's or sliding counter's
	// lease is counted in ends, or a sliding log's lease's entry leaves the
	// log (this instance's clock); zero for the buckets. Until then an
	// expired lease's units still count against the limit whatever happens,
	// and the lease is renewed rather than given back.
	windowEnd time.Time
	// remaining is what the shared store had left after the grant, resetAt
	// when the limit is fully available again (instance clock).
	remaining int64
	resetAt   time.Time

	// size is the next lease's; since and taken describe the current one,
	// to measure the rate it is spent at.
	size  int64
	since time.Time
	taken int64

	// refusedUntil: the shared store refused even one request's cost, and
	// nothing can change that before then but give-backs, which are
	// worth waiting for no longer than this.
	refusedUntil time.Time
	refused      enforce.LayerResult
	// refusedAt is the shared store's clock at the refusal, refusedSince
	// this instance's when the refusal's call was sent.
	refusedAt, refusedSince time.Time

	// dead: the sweep forgot this lease; whoever still holds it asks
	// for the map's.
	dead bool
}

// reservation is one request's units taken from a lease, to go back if
// another layer refuses the request.
type reservation struct {
	lease   *lease
	granted time.Time
	units   int64
}

// subjectLeases are one subject's leases, a few: one per leased limit of
// its plans (and key, for a PerKey limit). A request finds its subject's
// with one lookup keyed by a string, and each of its layers' leases in a
// list that is read without a lock; two lookups keyed by (subject, scope,
// name), which sync.Map hashes field by field through reflection, cost a
// leased decision a fifth of its CPU (BenchmarkPortalChain).
type subjectLeases struct {
	// list is replaced whole, under mu, when a lease is added or forgotten.
	list atomic.Pointer[[]*lease]
	mu   sync.Mutex
	// dead: the sweep forgot the subject, whose leases are all dead; a
	// lease is added to the map's subjectLeases instead.
	dead bool
}

// find returns the lease named k in the list, or nil.
func (sl *subjectLeases) find(k leaseKey) *lease {
	if p := sl.list.Load(); p != nil {
		for _, e := range *p {
			if e.key.name == k.name && e.key.scope == k.scope {
				return e
			}
		}
	}
	return nil
}

// subject returns the leases of a subject, made when missing.
func (s *Store) subject(subject string) *subjectLeases {
	if v, ok := s.leases.Load(subject); ok {
		return v.(*subjectLeases)
	}
	v, _ := s.leases.LoadOrStore(subject, &subjectLeases{})
	return v.(*subjectLeases)
}

// keyOf names the lease of req's limit i.
func keyOf(req *enforce.Request, i int) leaseKey {
	l := &req.Limits[i]
	k := leaseKey{subject: req.Subject, name: l.Name}
	if l.PerKey {
		k.scope = req.Key
	}
	return k
}

// entry returns the lease of req's limit i, made when missing; sl is the
// subject's leases when the caller has them (nil: looked up).
func (s *Store) entry(req *enforce.Request, i int, sl *subjectLeases) *lease {
	k := keyOf(req, i)
	if sl != nil {
		if e := sl.find(k); e != nil {
			return e
		}
	}
	for {
		sl = s.subject(req.Subject)
		if e := sl.find(k); e != nil {
			return e
		}
		sl.mu.Lock()
		if sl.dead {
			sl.mu.Unlock()
			continue
		}
		e := sl.find(k)
		if e == nil {
			e = &lease{key: k, subKey: req.Key}
			var list []*lease
			if p := sl.list.Load(); p != nil {
				list = append(list, *p...)
			}
			list = append(list, e)
			sl.list.Store(&list)
		}
		sl.mu.Unlock()
		return e
	}
}

// held is what this instance holds of req's limit i now.
func (s *Store) held(req enforce.Request, i int, now time.Time) int64 {
	e := s.entry(&req, i, nil)
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.expiredAt(now) {
		return e.units
	}
	return 0
}

// keeps reports whether e's units stay with this instance until windowEnd
// when it expires: a sliding log's leftover cannot be given back (its entry
// is the lease's, in time order), so the sweep leaves it for the next
// request here rather than strand it in the log until the entry leaves.
func (e *lease) keeps() bool { return e.limit.Algorithm == enforce.SlidingWindowLog }

// sameFigures reports whether a lease of a was taken under b's figures.
func sameFigures(a, b *enforce.Limit) bool {
	return a.Algorithm == b.Algorithm && a.Limit == b.Limit && a.Window == b.Window && a.Burst == b.Burst && a.Mode == b.Mode && a.Name == b.Name
}

// reserve takes req's limit i's cost from its lease (in sl, the subject's
// leases, when it is there), taking a new lease from the shared store
// when this one is spent, expired or of other figures (the limit was
// edited: the next lease follows the new limit), and writes the layer the
// request sees into lr. ok is false when no lease could be taken (the
// store failed): the layer is then decided as exact, and lr is left alone.
//
// at is the shared store's clock now, as the lease's grant (or refusal)
// and this instance's clock since tell it: a request admitted from a lease
// of a window is stamped inside that window.
func (s *Store) reserve(ctx context.Context, req *enforce.Request, i int, sl *subjectLeases, now time.Time, lr *enforce.LayerResult) (r reservation, at time.Time, ok bool) {
	l := &req.Limits[i]
	cost := max(l.Cost, 1)
	e := s.entry(req, i, sl)
	e.mu.Lock()
	for e.dead {
		e.mu.Unlock()
		e = s.entry(req, i, nil)
		e.mu.Lock()
	}
	defer e.mu.Unlock()
	if !sameFigures(&e.limit, l) {
		s.retire(e)
		e.limit, e.subKey = *l, req.Key
		e.limit.Cost = 0
		e.size, e.since, e.taken, e.remaining = 0, time.Time{}, 0, 0
		e.refusedUntil, e.resetAt, e.windowEnd = time.Time{}, time.Time{}, time.Time{}
	}
	e.anchor = req.Anchor
	if e.units >= cost && now.Before(e.expires) {
		e.units -= cost
		e.layer(lr, l, now)
		return reservation{lease: e, granted: e.granted, units: cost}, e.grantedAt(now), true
	}
	if e.units >= cost && now.Before(e.windowEnd) && now.UnixNano() >= s.down.Load() {
		// Expired within its window: its units count in the window
		// whatever happens, so it lives on (a lease ends with its window).
		e.expires = now.Add(enforce.LeaseTTL(*l))
		if e.windowEnd.Before(e.expires) {
			e.expires = e.windowEnd
		}
		e.units -= cost
		e.layer(lr, l, now)
		return reservation{lease: e, granted: e.granted, units: cost}, e.grantedAt(now), true
	}
	if now.Before(e.refusedUntil) {
		*lr = e.refused
		lr.Limit, lr.RetryAfter = *l, e.refusedUntil.Sub(now)
		return reservation{}, e.refusedAt.Add(now.Sub(e.refusedSince)), true
	}
	if now.UnixNano() < s.down.Load() {
		return reservation{}, time.Time{}, false
	}
	// Spent or expired: what is left goes back, and a new lease is sized
	// by the rate this one was spent at.
	n := e.nextSize(*l, s.instances, now)
	// Given back before the next lease is taken, so that the store holds
	// them when anyone asks next, this instance included.
	s.returnNow(ctx, e)
	refused, got, at, err := s.take(ctx, *req, i, n, now, e)
	if err != nil {
		s.down.Store(now.Add(time.Second).UnixNano())
		return reservation{}, time.Time{}, false
	}
	if got < cost {
		// Refused even one request's cost: until its retry, asking again
		// can only be answered by give-backs, which do not wait for us.
		e.refused, e.refusedUntil = refused, now.Add(refused.RetryAfter)
		e.refusedAt, e.refusedSince = at, now
		*lr = refused
		return reservation{}, at, true
	}
	e.units = got - cost
	e.layer(lr, l, now)
	return reservation{lease: e, granted: e.granted, units: cost}, e.granted, true
}

// take leases up to n units of req's limit i into e, and returns the layer
// the grant shows and the units granted (0 when refused; the layer then
// says why, for one request's cost). Near the end of the budget a second
// call takes what is left, if a request's cost fits in it.
func (s *Store) take(ctx context.Context, req enforce.Request, i int, n int64, now time.Time, e *lease) (enforce.LayerResult, int64, time.Time, error) {
	l := req.Limits[i]
	cost := max(l.Cost, 1)
	one := enforce.Request{Subject: req.Subject, Key: req.Key, Route: req.Route, Anchor: req.Anchor, Limits: []enforce.Limit{l}}
	sent := now
	for {
		one.Limits[0].Cost = n
		s.stats.Takes.Add(1)
		d, err := s.taker.Take(ctx, one)
		if err != nil {
			return enforce.LayerResult{}, 0, time.Time{}, err
		}
		lr := d.Layers[0]
		lr.Limit = l
		if lr.Allowed {
			e.granted, e.remaining = d.At, lr.Remaining
			e.resetAt = sent.Add(lr.ResetAfter)
			e.expires = sent.Add(enforce.LeaseTTL(l))
			switch l.Algorithm {
			case enforce.FixedWindow, enforce.SlidingWindowCounter:
				// The lease ends with the window it was counted in, so
				// the window's count holds every request it admits.
				w := l.Window.Microseconds()
				at := d.At.UnixMicro()
				e.windowEnd = sent.Add(enforce.Micros((at/w+1)*w - at))
				if e.windowEnd.Before(e.expires) {
					e.expires = e.windowEnd
				}
			case enforce.SlidingWindowLog:
				// The lease's entry is in the log until a window after
				// it was logged (no earlier than sent): its units are
				// spent there or nowhere, and one lease per instance
				// spent late is the stated over-admission however late.
				e.windowEnd = sent.Add(l.Window)
			default:
				e.windowEnd = time.Time{}
			}
			e.since, e.taken, e.size = sent, n, n
			return lr, n, d.At, nil
		}
		if n == cost {
			return lr, 0, d.At, nil
		}
		// Less is left than asked: take what is left, or learn when one
		// request's cost will fit.
		n = max(cost, min(lr.Remaining, n-1))
		if l.Algorithm == enforce.LeakyBucket {
			n = cost // a bucket that refused n refuses less only by its level
		}
	}
}

// nextSize is the next lease's size: the rate the last one was spent at
// over a lease's lifetime, twice over, between one request's cost and
// enforce.MaxLease; the first lease is an eighth of the most. Near the end
// of the budget it shrinks, so the instances share what is left.
func (e *lease) nextSize(l enforce.Limit, instances int, now time.Time) int64 {
	cost := max(l.Cost, 1)
	most := enforce.MaxLease(l, instances)
	if most <= cost {
		return cost
	}
	n := max(most/8, cost)
	if e.taken > 0 {
		used := e.taken - e.units
		elapsed := max(now.Sub(e.since), time.Millisecond)
		n = int64(float64(used) * float64(2*enforce.LeaseTTL(l)) / float64(elapsed))
	}
	if e.taken > 0 && e.remaining < most*int64(instances) {
		n = min(n, e.remaining/int64(2*instances))
	}
	return min(max(n, cost), most)
}

// grantedAt is the shared store's clock now as the lease tells it: its
// grant's instant plus the time since it was asked for. A request that
// read the clock before the lease was taken (it waited for the taker)
// is stamped with the grant: it is the lease's window's.
func (e *lease) grantedAt(now time.Time) time.Time {
	if now.Before(e.since) {
		return e.granted
	}
	return e.granted.Add(now.Sub(e.since))
}

// layer writes into lr the leased layer l as a request admitted from e
// sees it: what the instance holds plus what the shared store had left at
// the grant.
func (e *lease) layer(lr *enforce.LayerResult, l *enforce.Limit, now time.Time) {
	*lr = enforce.LayerResult{Limit: *l, Allowed: true, Remaining: e.units + e.remaining, ResetAfter: max(e.resetAt.Sub(now), 0)}
}

// release gives a refused request's units back to its lease, or to the
// shared store when the lease has been replaced meanwhile.
func (s *Store) release(r reservation) {
	e := r.lease
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.granted.Equal(r.granted) {
		e.units += r.units
		return
	}
	s.giveBack(e, r.units, r.granted)
}

// returnNow gives back what is left of e's lease and waits for the shared
// store to have it, unless the store fails (then it is queued); e.mu is
// held, so that no request here takes a new lease while these units are
// on their way. It reports whether the store answered.
func (s *Store) returnNow(ctx context.Context, e *lease) bool {
	if e.units <= 0 {
		return true
	}
	g := s.backOf(e, e.units, e.granted)
	err := s.taker.Refund(ctx, g.req, g.at)
	switch {
	case err == nil:
		s.stats.GivenBack.Add(e.units)
	case !errors.Is(err, enforce.ErrNotRefundable):
		s.queue(g)
	}
	e.units = 0
	return err == nil || errors.Is(err, enforce.ErrNotRefundable)
}

// retire gives back what is left of e's lease; e.mu is held.
func (s *Store) retire(e *lease) {
	if e.units > 0 {
		s.giveBack(e, e.units, e.granted)
	}
	e.units = 0
	e.expires, e.windowEnd = time.Time{}, time.Time{}
}
