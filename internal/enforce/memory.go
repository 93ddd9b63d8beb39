package enforce

import (
	"context"
	"hash/maphash"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// MemoryOptions configures a MemoryStore; the zero value is ready for
// production.
type MemoryOptions struct {
	// Now is the clock (default time.Now); tests inject a fake one.
	Now func() time.Time
	// Shards is the number of independently locked partitions of the state
	// (default 64, rounded up to a power of two); more shards mean less lock
	// contention across subjects.
	Shards int
	// SweepInterval bounds how long idle state can linger before a shard
	// drops it (default one minute). Shards also sweep whenever they have
	// doubled in size since the last sweep.
	SweepInterval time.Duration
	// DisableUsage turns off the usage series read by Usage.
	DisableUsage bool
	// Registerer, when set, receives the decision counters.
	Registerer prometheus.Registerer
}

// MemoryStore is the single-instance Store: every algorithm's state in
// process memory, sharded by subject. State is dropped once it no longer
// affects any decision (and its usage series has aged out), so memory stays
// bounded by the subjects active within the longest window or UsageRetention.
// It is safe for concurrent use.
type MemoryStore struct {
	now        func() time.Time
	seed       maphash.Seed
	shards     []memShard
	sweepEvery int64 // µs
	usage      bool
	metrics    *storeMetrics
}

type memShard struct {
	mu       sync.Mutex
	subjects map[string]*subjectState
	// The shard sweeps idle subjects when it reaches sweepLen entries or
	// the clock passes sweepAt (µs).
	sweepLen int
	sweepAt  int64
	_        [32]byte // pad to 64 bytes: neighbouring shards' locks on separate cache lines
}

type subjectState struct {
	limits  []limitState
	usage   []routeSeries
	expires int64 // µs: when nothing of this subject matters any more
}

// limitState is one limit's state; a limit edited to another window, limit
// or burst is a new state (the old one ages out), as in Redis, where those
// figures are part of the key.
type limitState struct {
	name    string
	kind    algKind
	window  int64
	limit   int64
	burst   int64
	counter counterState
	log     logRing
	expires int64
}

const minSweepLen = 64

// shardCount is n (default 64) rounded up to a power of two.
func shardCount(n int) int {
	if n <= 0 {
		n = 64
	}
	c := 1
	for c < n {
		c <<= 1
	}
	return c
}

// NewMemoryStore returns an empty MemoryStore. It starts no goroutines.
// Like prometheus.MustRegister it panics if opts.Registerer already holds a
// different metric under one of its names.
func NewMemoryStore(opts MemoryOptions) *MemoryStore {
	m, err := newStoreMetrics(opts.Registerer, "memory")
	if err != nil {
		panic(err)
	}
	s := &MemoryStore{
		now:        opts.Now,
		seed:       maphash.MakeSeed(),
		shards:     make([]memShard, shardCount(opts.Shards)),
		sweepEvery: opts.SweepInterval.Microseconds(),
		usage:      !opts.DisableUsage,
		metrics:    m,
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.sweepEvery <= 0 {
		s.sweepEvery = time.Minute.Microseconds()
	}
	for i := range s.shards {
		s.shards[i].subjects = make(map[string]*subjectState)
		s.shards[i].sweepLen = minSweepLen
	}
	return s
}

// Allow checks and consumes every limit of req atomically (see Store).
func (s *MemoryStore) Allow(ctx context.Context, req Request) (Decision, error) {
	return s.decide(req, true, nil)
}

// Peek evaluates req as Allow would, consuming and recording nothing:
// Allowed says whether Allow would admit it now, Remaining and ResetAfter
// describe the current state.
func (s *MemoryStore) Peek(ctx context.Context, req Request) (Decision, error) {
	return s.decide(req, false, nil)
}

// AllowInto is Allow writing Decision.Layers into layers' backing array when
// it is large enough, so a caller that reuses one slice decides without
// allocating.
func (s *MemoryStore) AllowInto(ctx context.Context, req Request, layers []LayerResult) (Decision, error) {
	return s.decide(req, true, layers)
}

// Len reports how many subjects hold state; tests and metrics use it to
// watch the eviction bound.
func (s *MemoryStore) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.subjects)
		sh.mu.Unlock()
	}
	return n
}

func (s *MemoryStore) shard(subject string) *memShard {
	// The count is a power of two, so a mask replaces a division.
	return &s.shards[maphash.String(s.seed, subject)&uint64(len(s.shards)-1)]
}

func (s *MemoryStore) decide(req Request, consume bool, layers []LayerResult) (Decision, error) {
	if err := validateRequest(req); err != nil {
		return Decision{}, err
	}
	var workBuf [maxInlineLayers]layerWork
	work := workBuf[:0]
	for i := range req.Limits {
		p, err := paramsOf(&req.Limits[i])
		if err != nil {
			return Decision{}, err
		}
		work = append(work, layerWork{p: p})
	}

	sh := s.shard(req.Subject)
	sh.mu.Lock()
	// Reading the clock under the lock keeps time monotonic per subject, so
	// racing requests cannot step a window back.
	nowT := s.now()
	now := nowT.UnixMicro()
	sub := sh.subjects[req.Subject]
	allowed := true
	for i := range work {
		w := &work[i]
		w.out = evaluate(sub.find(req.Limits[i].Name, &w.p), w, now, consume)
		allowed = allowed && w.out.allowed
	}
	if consume && (allowed || s.usage) {
		if sub == nil {
			sub = &subjectState{}
			sh.subjects[req.Subject] = sub
		}
		if allowed {
			s.commit(sub, req, work, now)
		} else {
			// All or nothing: the layers that would have admitted report
			// their state untouched.
			for i := range work {
				if w := &work[i]; w.out.allowed {
					w.out = evaluate(sub.find(req.Limits[i].Name, &w.p), w, now, false)
				}
			}
		}
		if s.usage {
			sub.recordUsage(req.Route, nowT.Unix(), allowed)
			sub.expires = max(sub.expires, now+UsageRetention.Microseconds())
		}
	}
	if consume && (len(sh.subjects) >= sh.sweepLen || now >= sh.sweepAt) {
		sh.sweep(now, s.sweepEvery)
	}
	sh.mu.Unlock()

	d := Decision{Allowed: allowed, Layers: layers[:0]}
	for i := range work {
		w := &work[i]
		d.Layers = append(d.Layers, w.out.result(req.Limits[i]))
		if consume && allowed && w.p.queue {
			d.Delay = max(d.Delay, micros(w.out.wait))
		}
	}
	s.metrics.count(allowed)
	return d, nil
}

// commit writes the consumed state of every layer and drops limit state
// that no longer matters (a limit renamed or removed from the plan).
func (s *MemoryStore) commit(sub *subjectState, req Request, work []layerWork, now int64) {
	for i := range work {
		w := &work[i]
		st := sub.find(req.Limits[i].Name, &w.p)
		if st == nil {
			sub.limits = append(sub.limits, limitState{name: req.Limits[i].Name, kind: w.p.kind, window: w.p.window, limit: w.p.limit, burst: w.p.burst})
			st = &sub.limits[len(sub.limits)-1]
		}
		if w.p.kind == kindSlidingLog {
			st.log.commit(now, w.p.window, w.p.cost)
			st.expires = now + w.p.window
		} else {
			st.counter = w.next
			st.expires = w.next.expiresAt(&w.p)
		}
	}
	stale := false
	for i := range sub.limits {
		if st := &sub.limits[i]; st.expires > now {
			sub.expires = max(sub.expires, st.expires)
		} else {
			stale = true
		}
	}
	if stale {
		kept := sub.limits[:0]
		for _, st := range sub.limits {
			if st.expires > now {
				kept = append(kept, st)
			}
		}
		clear(sub.limits[len(kept):])
		sub.limits = kept
	}
}

// layerWork is one layer's scratch space during a decision.
type layerWork struct {
	p    params
	out  layerOut
	next counterState
}

// evaluate runs one layer's algorithm over its stored state (st may be nil).
func evaluate(st *limitState, w *layerWork, now int64, commit bool) layerOut {
	if w.p.kind == kindSlidingLog {
		var r *logRing
		if st != nil {
			r = &st.log
		}
		return evalSlidingLog(r, &w.p, now, commit)
	}
	if st == nil {
		var none counterState
		return evalCounter(&none, &w.p, now, commit, &w.next)
	}
	return evalCounter(&st.counter, &w.p, now, commit, &w.next)
}

func (sub *subjectState) find(name string, p *params) *limitState {
	if sub == nil {
		return nil
	}
	for i := range sub.limits {
		st := &sub.limits[i]
		if st.name == name && st.kind == p.kind && st.window == p.window && st.limit == p.limit && st.burst == p.burst {
			return st
		}
	}
	return nil
}

func (sub *subjectState) recordUsage(route string, unixSeconds int64, allowed bool) {
	for i := range sub.usage {
		if sub.usage[i].route == route {
			sub.usage[i].record(unixSeconds, allowed)
			return
		}
	}
	sub.usage = append(sub.usage, routeSeries{route: route})
	sub.usage[len(sub.usage)-1].record(unixSeconds, allowed)
}

// sweep drops every subject whose state no longer matters. It runs when the
// shard has doubled since the last sweep (amortised O(1) per insert) or the
// sweep interval has passed, so idle subjects cannot pile up.
func (sh *memShard) sweep(now, every int64) {
	for k, sub := range sh.subjects {
		if sub.expires <= now {
			delete(sh.subjects, k)
		}
	}
	sh.sweepLen = max(minSweepLen, 2*len(sh.subjects))
	sh.sweepAt = now + every
}

// Usage returns the usage of subjects in the buckets that end after since,
// ordered by subject, route and bucket.
func (s *MemoryStore) Usage(ctx context.Context, subjects []string, since time.Time) ([]UsagePoint, error) {
	from := usageBucketStart(since.Unix())
	var points []UsagePoint
	for _, subject := range subjects {
		sh := s.shard(subject)
		sh.mu.Lock()
		if sub := sh.subjects[subject]; sub != nil {
			for _, series := range sub.usage {
				for _, b := range series.buckets {
					if b.start >= from {
						points = append(points, UsagePoint{
							Subject: subject, Route: series.route, Bucket: time.Unix(b.start, 0).UTC(),
							Admitted: b.admitted, Rejected: b.rejected,
						})
					}
				}
			}
		}
		sh.mu.Unlock()
	}
	sortUsage(points)
	return points, nil
}

func sortUsage(points []UsagePoint) {
	sort.Slice(points, func(i, j int) bool {
		a, b := points[i], points[j]
		if a.Subject != b.Subject {
			return a.Subject < b.Subject
		}
		if a.Route != b.Route {
			return a.Route < b.Route
		}
		return a.Bucket.Before(b.Bucket)
	})
}
