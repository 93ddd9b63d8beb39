// Package leased decides the limits whose precision is not exact at the
// speed of memory, around the store that decides the exact ones.
//
// A leased limit (enforce.PrecisionLeased) is decided from a slice of the
// subject's budget that this instance took from the shared store in one
// script call (Taker.Take, the limit's cost set to the slice): requests
// spend it here until it is spent or expires, and what is left is given
// back (enforce.Refunder). The slice adapts to the subject's observed rate,
// never past enforce.MaxLease, so a hot subject costs a few script calls a
// second and a small limit stays exact. A local limit
// (enforce.PrecisionLocal) is decided by this instance alone on its share
// of the limit (enforce.ShareOf), in memory.
//
// One request stays all or nothing across precisions: its leased units are
// reserved first (given back to the lease if anything else rejects), then
// its local layers are decided (refunded in memory if the exact ones
// reject), then its exact layers, in one call of the inner store.
//
// Faults: a lease already held keeps serving while the shared store is
// down, until it expires; after that a leased limit is decided as exact
// by the inner store, so the failure mode applies as for any other.
// Units given back while the store is down are kept and given back when it
// returns (a window's units given back after the window has ended are
// worth nothing, and the refund rule drops them).
package leased

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
)

// Taker is the shared store leases are taken from: Take decides and
// consumes req's limits at their given costs, all or nothing, counting no
// usage (redisstore.Store.Take).
type Taker interface {
	Take(ctx context.Context, req enforce.Request) (enforce.Decision, error)
	enforce.Refunder
}

// Tallier counts a decision made here at the instant at (this instance's
// clock) in the shared store's usage statistics (redisstore.Store.TallyAt);
// optional.
type Tallier interface {
	TallyAt(req enforce.Request, allowed bool, at time.Time)
}

// Options configures New.
type Options struct {
	// Instances is how many instances share the limits (PORTAL_INSTANCES):
	// a local limit is divided by it, a lease cut by it (enforce.MaxLease).
	Instances int
	// Now is the instance's clock (time.Now when nil).
	Now func() time.Time
	// Logger reports give-backs kept for a store that is down.
	Logger *slog.Logger
	// MaxSubjects caps the local limits' memory store (0: its default).
	MaxSubjects int
}

// Store decides leased and local limits here and passes exact ones to the
// inner store. Safe for concurrent use; Close stops its give-back worker.
type Store struct {
	inner     enforce.Store
	into      enforce.LayersAllower
	taker     Taker
	tally     Tallier
	local     *memstore.Store
	instances int
	now       func() time.Time
	log       *slog.Logger

	// leases holds every subject's leases. A hot subject's are read by
	// every request on every core: sync.Map reads them without a lock,
	// where a mutex per shard of the leases was one more cache line all
	// the cores wrote per layer.
	leases sync.Map // subject -> *subjectLeases

	// down is when the taker may be tried again after it failed (unix ns).
	down atomic.Int64

	backMu  sync.Mutex
	pending []giveBack
	wake    chan struct{}
	stop    chan struct{}
	done    chan struct{}

	stats     Stats
	closeOnce sync.Once

	// shares caches the local layers' shares per plan: the memory store
	// knows a limit slice it has seen by its address, so giving it the
	// same slice for the same plan spares it validating one per decision.
	shares sync.Map // shareKey -> []enforce.Limit
}

type shareKey struct {
	first *enforce.Limit
	n     int
}

// localShares returns the shares of req's limits at idx (all local), the
// same slice for the same plan's limits.
func (s *Store) localShares(req enforce.Request, idx []int) []enforce.Limit {
	k := shareKey{&req.Limits[0], len(req.Limits)}
	n := int64(s.instances)
	if v, ok := s.shares.Load(k); ok {
		cached := v.([]enforce.Limit)
		if len(cached) == len(idx) {
			same := true
			for j, i := range idx {
				if cached[j] != enforce.ShareOf(req.Limits[i], n) {
					same = false
					break
				}
			}
			if same {
				return cached
			}
		}
	}
	out := subset(req, idx, true, n).Limits
	s.shares.Store(k, out)
	return out
}

// Stats counts what the store did, for tests, benchmarks and metrics.
type Stats struct {
	// Takes is the number of Take calls (script calls for leases).
	Takes atomic.Int64
	// Decisions is the number of requests with a leased or local layer.
	Decisions atomic.Int64
	// Admitted is how many of those were admitted.
	Admitted atomic.Int64
	// GivenBack is the units given back to the shared store.
	GivenBack atomic.Int64
	// Fallbacks is the leased layers decided as exact because the shared
	// store could not lease.
	Fallbacks atomic.Int64
}

// New returns a Store deciding exact limits with inner, leasing from taker
// (the shared store under inner; usually the same Redis store), and
// counting usage through taker when it is a Tallier.
func New(inner enforce.Store, taker Taker, opts Options) *Store {
	s := &Store{
		inner: inner, taker: taker, instances: max(opts.Instances, 1), now: opts.Now, log: opts.Logger,
		local: memstore.New(memstore.Options{MaxSubjects: opts.MaxSubjects}),
		wake:  make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.into, _ = inner.(enforce.LayersAllower)
	s.tally, _ = taker.(Tallier)
	go s.run()
	return s
}

// Stats returns the store's counters.
func (s *Store) Stats() *Stats { return &s.stats }

// Unwrap returns the inner store, whose properties (clock stamps, slots)
// are the Store's.
func (s *Store) Unwrap() enforce.Store { return s.inner }

// StampsDecisions is the inner store's: a decision of leased layers only
// is stamped with the instance's clock, which the leases' expiry and
// reset already count from.
func (s *Store) StampsDecisions() bool { return enforce.StampsDecisions(s.inner) }

// Close gives back every lease held (one last try) and stops the worker.
func (s *Store) Close() error {
	s.closeOnce.Do(s.close)
	return nil
}

func (s *Store) close() {
	for _, v := range s.leases.Range {
		sl := v.(*subjectLeases)
		sl.mu.Lock()
		if p := sl.list.Load(); p != nil {
			for _, e := range *p {
				e.mu.Lock()
				s.retire(e)
				e.mu.Unlock()
			}
		}
		sl.mu.Unlock()
	}
	close(s.stop)
	<-s.done
}

// Allow decides req: see the package comment.
func (s *Store) Allow(ctx context.Context, req enforce.Request) (enforce.Decision, error) {
	return s.AllowInto(ctx, req, nil)
}

// AllowInto is Allow; a request of exact limits only goes to the inner
// store's AllowInto untouched.
func (s *Store) AllowInto(ctx context.Context, req enforce.Request, layers []enforce.LayerResult) (enforce.Decision, error) {
	if !mixed(req.Limits) {
		if s.into != nil {
			return s.into.AllowInto(ctx, req, layers)
		}
		return s.inner.Allow(ctx, req)
	}
	if err := enforce.ValidateRequest(req); err != nil {
		return enforce.Decision{}, err
	}
	s.stats.Decisions.Add(1)
	return s.decide(ctx, req, layers)
}

// Peek evaluates req without consuming: exact and leased layers as the
// shared store has them (a leased layer adds what this instance holds),
// local ones as this instance has them.
func (s *Store) Peek(ctx context.Context, req enforce.Request) (enforce.Decision, error) {
	return s.peek(ctx, s.inner, req)
}

// peek is Peek reading the shared layers through shared.
func (s *Store) peek(ctx context.Context, shared enforce.Store, req enforce.Request) (enforce.Decision, error) {
	if !mixed(req.Limits) {
		return shared.Peek(ctx, req)
	}
	var remote, local []int
	for i := range req.Limits {
		if req.Limits[i].Precision == enforce.PrecisionLocal {
			local = append(local, i)
		} else {
			remote = append(remote, i)
		}
	}
	layers := make([]enforce.LayerResult, len(req.Limits))
	var at time.Time
	if len(remote) > 0 {
		d, err := shared.Peek(ctx, subset(req, remote, false, 0))
		if err != nil {
			return enforce.Decision{}, err
		}
		at = d.At
		now := s.now()
		for j, i := range remote {
			lr := d.Layers[j]
			lr.Limit = req.Limits[i]
			if lr.Limit.Precision == enforce.PrecisionLeased {
				lr.Remaining += s.held(req, i, now)
			}
			layers[i] = lr
		}
	}
	if len(local) > 0 {
		d, err := s.local.Peek(ctx, subset(req, local, true, int64(s.instances)))
		if err != nil {
			return enforce.Decision{}, err
		}
		for j, i := range local {
			layers[i] = d.Layers[j]
			layers[i].Limit = req.Limits[i]
		}
	}
	return enforce.Decision{Allowed: allAllowed(layers), Layers: layers, At: at}, nil
}

// Dashboard returns the store the dashboards read through: shared (their
// own Redis client) for exact and leased layers, plus what this instance
// holds of a leased one, and this instance's share for a local one. Only
// Peek is meant for it; Allow decides as the Store does. A nil shared is
// the Store itself.
func (s *Store) Dashboard(shared enforce.Store) enforce.Store {
	if shared == nil {
		return s
	}
	return dashboard{s, shared}
}

type dashboard struct {
	*Store
	shared enforce.Store
}

func (d dashboard) Peek(ctx context.Context, req enforce.Request) (enforce.Decision, error) {
	return d.peek(ctx, d.shared, req)
}

// AcquireSlots passes concurrency, which is always exact, to the inner
// store.
func (s *Store) AcquireSlots(ctx context.Context, req enforce.Request, d time.Duration) (*enforce.Lease, enforce.Decision, error) {
	slots, ok := s.inner.(enforce.SlotStore)
	if !ok {
		return nil, enforce.Decision{}, enforce.ErrSlotsAllow
	}
	return slots.AcquireSlots(ctx, req, d)
}

// ReleaseToken passes to the inner store.
func (s *Store) ReleaseToken(ctx context.Context, token string) error {
	slots, ok := s.inner.(enforce.SlotStore)
	if !ok {
		return enforce.ErrSlotsAllow
	}
	return slots.ReleaseToken(ctx, token)
}

// Refund passes a give-back to the inner store (the exact layers' units).
func (s *Store) Refund(ctx context.Context, req enforce.Request, at time.Time) error {
	r, ok := s.inner.(enforce.Refunder)
	if !ok {
		return errors.ErrUnsupported
	}
	return r.Refund(ctx, req, at)
}

// Charge passes a charge after the response to the inner store.
func (s *Store) Charge(ctx context.Context, req enforce.Request) error {
	c, ok := s.inner.(enforce.Charger)
	if !ok {
		return errors.ErrUnsupported
	}
	return c.Charge(ctx, req)
}

// mixed reports whether any limit is not exact.
func mixed(limits []enforce.Limit) bool {
	for i := range limits {
		if p := limits[i].Precision; p != "" && p != enforce.PrecisionExact {
			return true
		}
	}
	return false
}

// subset returns req with only the limits at idx, each as one instance's
// share of it when share is set.
func subset(req enforce.Request, idx []int, share bool, n int64) enforce.Request {
	out := req
	out.Limits = make([]enforce.Limit, len(idx))
	for j, i := range idx {
		l := req.Limits[i]
		if share {
			l = enforce.ShareOf(l, n)
		}
		out.Limits[j] = l
	}
	return out
}

// allAllowed is a decision's verdict over its layers: every layer but a
// shadow one admits.
func allAllowed(layers []enforce.LayerResult) bool {
	for i := range layers {
		if !layers[i].Allowed && layers[i].Limit.Mode != enforce.ModeShadow {
			return false
		}
	}
	return true
}
