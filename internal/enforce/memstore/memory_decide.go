package memstore

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
)

func (s *Store) decide(req *enforce.Request, consume bool, layers []enforce.LayerResult) (enforce.Decision, error) {
	var d enforce.Decision
	var err error
	if set := s.sets.get(req.Limits); set != nil {
		if consume && set.oneCounter && s.allowOne(&d, req, set, layers) {
			return d, nil
		}
		err = s.decideCompiled(&d, req, set.params, set.keys, consume, layers)
	} else {
		err = s.decideUncached(&d, req, consume, layers)
	}
	if err != nil {
		return enforce.Decision{}, err
	}
	return d, nil
}

// decideUncached validates a limit slice the cache does not hold (yet).
func (s *Store) decideUncached(d *enforce.Decision, req *enforce.Request, consume bool, layers []enforce.LayerResult) error {
	var buf [enforce.MaxInlineLayers]enforce.Params
	ps, keys, err := s.sets.compile(req.Limits, buf[:0])
	if err != nil {
		return err
	}
	return s.decideCompiled(d, req, ps, keys, consume, layers)
}

// decideCompiled decides req into d; its limits have params ps and, when
// their set is cached, state keys keys (else nil).
func (s *Store) decideCompiled(d *enforce.Decision, req *enforce.Request, ps []enforce.Params, keys []limitKey, consume bool, layers []enforce.LayerResult) error {
	// Scratch space: each layer's stored state (nil when it has none yet),
	// verdict, and, for an admitting counter layer, state after consuming.
	// Go zeroes it on every call, so a one-layer decision, the most common,
	// gets room for one layer, not maxInlineLayers: 160 bytes to clear
	// instead of 640.
	if len(ps) == 1 {
		var states [1]*limitState
		var outs [1]enforce.LayerOut
		var next [1]enforce.CounterState
		var cur [1]layerState
		return s.decideWith(d, req, ps, keys, consume, layers, states[:], outs[:], next[:], cur[:])
	}
	var statesBuf [enforce.MaxInlineLayers]*limitState
	var outsBuf [enforce.MaxInlineLayers]enforce.LayerOut
	var nextBuf [enforce.MaxInlineLayers]enforce.CounterState
	var curBuf [enforce.MaxInlineLayers]layerState
	states, outs, next, cur := statesBuf[:], outsBuf[:], nextBuf[:], curBuf[:]
	if len(ps) > enforce.MaxInlineLayers {
		states, outs, next = make([]*limitState, len(ps)), make([]enforce.LayerOut, len(ps)), make([]enforce.CounterState, len(ps))
		cur = make([]layerState, len(ps))
	}
	return s.decideWith(d, req, ps, keys, consume, layers, states, outs, next, cur)
}

// decideWith is decideCompiled with its scratch space, one element per
// layer at least.
func (s *Store) decideWith(d *enforce.Decision, req *enforce.Request, ps []enforce.Params, keys []limitKey, consume bool, layers []enforce.LayerResult,
	states []*limitState, outs []enforce.LayerOut, next []enforce.CounterState, cur []layerState) error {
	// The clock is read before the lock, which then guards nothing but the
	// state itself.
	now := s.clock()
	anchor := enforce.AnchorMicros(req.Anchor)
	sh, h := s.locate(req.Subject)
	var route uint32
	if s.usage && consume {
		route = s.routes.id(req.Route) // outside the subject's lock
	}
	var sub *subjectState
	for {
		sub = sh.get(h, req.Subject)
		if sub == nil {
			// A subject with state was valid when the state was made, so
			// only an unknown one is checked.
			if err := enforce.ValidateSubject(req.Subject); err != nil {
				return err
			}
			if strings.ContainsAny(req.Key, "{}") {
				return fmt.Errorf("%w: key %q contains a brace", enforce.ErrInvalidRequest, req.Key)
			}
			if !consume || (!s.usage && !admitsFresh(ps, now, anchor)) {
				// Nothing to read, and nothing to write: a peek, or a
				// request that even fresh state rejects (its cost exceeds a
				// limit), which with usage off records nothing.
				break
			}
			sub = sh.add(h, req.Subject, now, s.sweepEvery, s.shardMax, s.evictions)
		}
		sub.mu.Lock()
		if !sub.dead {
			break
		}
		sub.mu.Unlock() // swept meanwhile: look again
	}
	if sub != nil && now < sub.last {
		// A racing request read the clock after this one but wrote first,
		// or a sweep dropped state at a later reading (a subject added
		// since starts at its shard's sweptAt): read it again, so that a
		// subject's state never steps back in time (as when the clock is
		// read under the lock) and no decision counts afresh in a window
		// whose state was dropped.
		now = s.clock()
	}
	allowed := true
	for i := range ps {
		p := &ps[i]
		var key *limitKey
		if keys != nil {
			key = &keys[i]
		}
		st := sub.find(key, req.Limits[i].Name, p, scopeOf(req, i))
		states[i] = st
		cur[i].of(st, p, now)
		evaluate(&cur[i], p, now, anchor, consume, &next[i], &outs[i])
		allowed = allowed && (outs[i].Allowed || p.Shadow)
	}
	if consume {
		sub.settle(req, ps, keys, states, cur, next, outs, now, anchor, allowed)
		if s.usage {
			sub.recordUsage(route, now, allowed)
		}
		if sub != nil {
			sub.last = max(sub.last, now)
			for i := range ps {
				if !outs[i].Allowed || outs[i].Remaining <= 0 {
					sub.guard = max(sub.guard, now+outs[i].Reset)
				}
			}
		}
	}
	if sub != nil {
		sub.mu.Unlock()
	}
	if consume && now >= sh.sweepAt.Load() {
		sh.mu.Lock()
		if now >= sh.sweepAt.Load() {
			sh.sweep(now, s.sweepEvery)
		}
		sh.mu.Unlock()
	}

	// The results are written outside the lock, which is held only as long
	// as the state needs it. Field by field: a composite literal would be
	// built on the stack and copied; fill writes every field of a layer, so
	// the layers need no zeroing.
	d.Allowed = allowed
	d.Layers = slices.Grow(layers[:0], len(ps))[:len(ps)]
	d.At = time.UnixMicro(now)
	var wait int64
	for i := range ps {
		outs[i].Fill(&d.Layers[i], &req.Limits[i])
		if ps[i].Queue {
			wait = max(wait, outs[i].Wait)
		}
	}
	if consume && allowed {
		d.Delay = enforce.Micros(wait)
	}
	s.metrics.Count(allowed)
	return nil
}

// allowOne is Allow on the most common request, a plan of one counter
// limit (not a sliding log, not PerKey) whose state is its subject's first,
// written under the same name and figures (see adopt): it reads
// and writes that state alone, with none of decideWith's scratch space,
// find, rescaling, commit's checks or a rejection's second pass. It returns
// false, having read and written nothing, when anything else holds (a new
// subject, another state, a clock reading older than the subject's latest
// write), and decideWith decides instead.
//
// A one-limit plan is the one the portal's tiers give. Taking it apart from
// the general path (where it was a branch of decideWith) took the hot key
// from 1,118 instructions a decision to 890-910 (callgrind, usage and
// metrics on), and its time serially from 1.24x x/time/rate's to 1.10x
// (BenchmarkMemoryInterleaved, medians of three alternating runs at load
// average 5, 2026-12-03; see memory_bench_test.go).
func (s *Store) allowOne(d *enforce.Decision, req *enforce.Request, set *limitSet, layers []enforce.LayerResult) bool {
	sh, h := s.locate(req.Subject)
	sub := sh.candidate(h)
	if sub == nil {
		return false
	}
	var route uint32
	if s.usage {
		route = s.routes.id(req.Route) // outside the subject's lock
	}
	p := &set.params[0]
	// The clock is read before the lock, as in decideWith.
	now := s.clock()
	sub.mu.Lock()
	if !sub.is(req.Subject) {
		// Another subject's tag: look the subject up.
		sub.mu.Unlock()
		if sub = sh.get(h, req.Subject); sub == nil {
			return false
		}
		sub.mu.Lock()
	}
	st := &sub.lim0
	if sub.dead || now < sub.last || sub.nlimits == 0 || st.ext != nil || !st.adopt(&set.keys[0]) {
		sub.mu.Unlock()
		return false
	}
	var out enforce.LayerOut
	var next enforce.CounterState
	evalCounter(&st.counter, p, now, enforce.AnchorMicros(req.Anchor), true, &next, &out)
	allowed := out.Allowed || p.Shadow
	if out.Allowed {
		st.counter = next
	}
	if s.usage {
		sub.recordUsage(route, now, allowed)
	}
	sub.last = now
	if !out.Allowed || out.Remaining <= 0 {
		sub.guard = max(sub.guard, now+out.Reset)
	}
	sub.mu.Unlock()
	if now >= sh.sweepAt.Load() {
		sh.mu.Lock()
		if now >= sh.sweepAt.Load() {
			sh.sweep(now, s.sweepEvery)
		}
		sh.mu.Unlock()
	}
	d.Allowed = allowed
	d.Layers = slices.Grow(layers[:0], 1)[:1]
	d.At = time.UnixMicro(now)
	out.Fill(&d.Layers[0], &req.Limits[0])
	if allowed && p.Queue {
		d.Delay = enforce.Micros(out.Wait)
	}
	s.metrics.Count(allowed)
	return true
}

// adopt reports whether st is the state of the limit whose key is key:
// the same key, or one naming the same limit under the same figures (the
// key of another slice of equal limits, such as one a caller builds per
// goroutine or per request), which st then takes, as find does, so that
// the next decision compares pointers only. Without it, two slices of
// equal limits that take turns on a subject sent every other decision to
// decideWith (a third of BenchmarkMemoryStore/Usage/100kKeys/Parallel's
// time, where each goroutine builds its own slice).
func (st *limitState) adopt(key *limitKey) bool {
	if st.key == key {
		return true
	}
	if !sameString(st.key.name, key.name) || st.key.Figures != key.Figures {
		return false
	}
	st.key = key
	return true
}

// settle writes what the general path decided: every layer's consumed state
// when the request is admitted, else only the states a rejection rescaled.
// sub may be nil only when nothing was admitted.
func (sub *subjectState) settle(req *enforce.Request, ps []enforce.Params, keys []limitKey, states []*limitState, cur []layerState,
	next []enforce.CounterState, outs []enforce.LayerOut, now, anchor int64, allowed bool) {
	if allowed {
		// A shadow layer over its limit keeps its rescaled state as after
		// a rejection; before commit, which may move the states.
		sub.keepRescaled(req, ps, keys, states, cur, outs)
		sub.commit(req, ps, keys, states, next, outs, now)
		return
	}
	// All or nothing: the layers that would have admitted report their
	// state untouched.
	for i := range ps {
		if outs[i].Allowed {
			evaluate(&cur[i], &ps[i], now, anchor, false, nil, &outs[i])
		}
	}
	sub.keepRescaled(req, ps, keys, states, cur, nil)
}

// admitsFresh reports whether a subject with no state would be admitted by
// every limit. Fresh state is the most a subject can have left, so a request
// it rejects is rejected whatever state another request creates meanwhile.
func admitsFresh(ps []enforce.Params, now, anchor int64) bool {
	var out enforce.LayerOut
	var none layerState
	for i := range ps {
		evaluate(&none, &ps[i], now, anchor, false, nil, &out)
		if !out.Allowed && !ps[i].Shadow {
			return false
		}
	}
	return true
}

// commit writes the consumed state of every layer of an admitted request:
// states[i] is layer i's stored state or nil, next[i] its counter after
// consuming, keys the limit set's keys (nil when it is not cached). It drops
// limit state that no longer matters (a limit renamed or removed from the
// plan) before adding any, so a subject holds no more states than it has
// live limits.
func (sub *subjectState) commit(req *enforce.Request, ps []enforce.Params, keys []limitKey, states []*limitState, next []enforce.CounterState, outs []enforce.LayerOut, now int64) {
	fresh := false
	for i := range ps {
		st := states[i]
		if !outs[i].Allowed {
			// A shadow limit over its limit lets the request pass and
			// consumes nothing, as if it had rejected.
			continue
		}
		if st == nil {
			fresh = true
			continue
		}
		if key := keyOf(keys, i); st.key != key {
			st.refigure(key, &req.Limits[i], &ps[i])
		}
		st.consume(&ps[i], &next[i], now)
	}
	if !fresh {
		return
	}
	// Appending below may move the states, so the pointers in states are
	// not used past this point.
	sub.dropStale(now)
	for i := range ps {
		if states[i] != nil || !outs[i].Allowed {
			continue
		}
		p := &ps[i]
		var key *limitKey
		if keys != nil {
			key = &keys[i]
		} else {
			key = new(newLimitKey(&req.Limits[i], p))
		}
		st := limitState{key: key}
		if scope := scopeOf(req, i); scope != "" {
			st.ext = &limitExt{scope: scope}
		}
		sub.addLimit(st).consume(p, &next[i], now)
	}
}

// keepRescaled stores, after a rejection, the states a decision rescaled to
// new figures (see rescale): a rejection consumes nothing, but the moment a
// state is rescaled is the first decision after the edit, as in Redis, not
// each one until a request is admitted.
// With outs set, only the layers that rejected are kept (the others are
// about to be written by commit).
func (sub *subjectState) keepRescaled(req *enforce.Request, ps []enforce.Params, keys []limitKey, states []*limitState, cur []layerState, outs []enforce.LayerOut) {
	for i := range ps {
		st, p := states[i], &ps[i]
		if st == nil || st.key.Figures == enforce.FiguresOf(p) || (outs != nil && outs[i].Allowed) {
			continue
		}
		st.refigure(keyOf(keys, i), &req.Limits[i], p)
		if c := cur[i].state(); p.Kind != enforce.KindSlidingLog && c != nil {
			st.counter = *c
		}
	}
}

// scopeOf is the scope of req's layer i: its Key for a PerKey limit, else
// the whole subject.
func scopeOf(req *enforce.Request, i int) string {
	if req.Limits[i].PerKey {
		return req.Key
	}
	return ""
}

// consume writes an admitted layer's new state.
func (st *limitState) consume(p *enforce.Params, next *enforce.CounterState, now int64) {
	if p.Kind == enforce.KindSlidingLog {
		if st.ext == nil {
			st.ext = new(limitExt)
		}
		st.ext.log.Commit(now, p.Window, p.Cost)
		return
	}
	st.counter = *next
}

// dropStale removes the limit states that no longer affect any decision.
func (sub *subjectState) dropStale(now int64) {
	n, kept := sub.numLimits(), 0
	for i := range n {
		if st := sub.limitAt(i); st.expiry() > now {
			if kept != i {
				*sub.limitAt(kept) = *st
			}
			kept++
		}
	}
	for i := kept; i < n; i++ {
		*sub.limitAt(i) = limitState{}
	}
	if sub.extra != nil {
		sub.extra.limits = sub.extra.limits[:max(kept-1, 0)]
	}
	sub.nlimits = uint32(kept)
}

// keyOf is layer i's key in a cached limit set, or nil.
func keyOf(keys []limitKey, i int) *limitKey {
	if keys == nil {
		return nil
	}
	return &keys[i]
}

// refigure makes st the state of the limit l, with params p, before an
// admitted request writes it: the state it holds was rescaled for the
// decision (see layerState.of), so only the figures it is stored under change,
// and what another algorithm left is dropped.
func (st *limitState) refigure(key *limitKey, l *enforce.Limit, p *enforce.Params) {
	f := enforce.FiguresOf(p)
	if st.key.Figures == f {
		if key != nil {
			st.key = key // only the pointer was another set's
		}
		return
	}
	if st.key.Kind != p.Kind {
		st.counter = enforce.CounterState{}
		if st.ext != nil {
			st.ext.log = enforce.LogRing{}
		}
	}
	if key == nil {
		key = &limitKey{name: l.Name, Figures: f}
	}
	st.key = key
}

// layerState is what a layer decides over: its stored counter, or that
// counter rescaled (scaled, when rescaled is set) because the limit's figures
// changed since it was written, or its sliding log; nil pointers when it has
// none. It holds no pointer to itself, which would move every decision's
// scratch space to the heap.
type layerState struct {
	counter  *enforce.CounterState
	log      *enforce.LogRing
	scaled   enforce.CounterState
	rescaled bool
}

// state is the counter state the layer decides over, or nil.
func (ls *layerState) state() *enforce.CounterState {
	if ls.rescaled {
		return &ls.scaled
	}
	return ls.counter
}

// of points ls at st's state as a state of p at now (st may be nil).
func (ls *layerState) of(st *limitState, p *enforce.Params, now int64) {
	ls.counter, ls.log, ls.rescaled = nil, nil, false
	if st == nil {
		return
	}
	f := enforce.FiguresOf(p)
	switch {
	case st.key.Figures == f:
		ls.counter, ls.log = &st.counter, st.logRing()
	case st.key.Kind != p.Kind:
		// another algorithm's state means nothing to this one
	case p.Kind == enforce.KindSlidingLog:
		ls.log = st.logRing() // logged times mean the same under any window
	default:
		ls.scaled, ls.rescaled = enforce.Rescale(st.counter, st.key.Figures, p, now), true
	}
}

// evaluate runs one layer's algorithm over its state into out; when commit
// is true and the layer admits, a counter layer's consumed state goes to
// next. Results are written through pointers rather than returned: copying a
// returned struct that was just stored field by field stalls store-to-load
// forwarding on the hot path.
func evaluate(ls *layerState, p *enforce.Params, now, anchor int64, commit bool, next *enforce.CounterState, out *enforce.LayerOut) {
	if p.Kind == enforce.KindSlidingLog {
		enforce.EvalSlidingLog(ls.log, p, now, commit, out)
		return
	}
	var none enforce.CounterState
	c := &none
	if s := ls.state(); s != nil {
		c = s
	}
	evalCounter(c, p, now, anchor, commit, next, out)
}

// evalCounter is evaluate on a counter layer (any algorithm but the sliding
// log), whose state is c.
func evalCounter(c *enforce.CounterState, p *enforce.Params, now, anchor int64, commit bool, next *enforce.CounterState, out *enforce.LayerOut) {
	switch p.Kind {
	case enforce.KindTokenBucket:
		enforce.EvalTokenBucket(c, p, now, commit, next, out)
	case enforce.KindFixedWindow:
		enforce.EvalFixedWindow(c, p, now, commit, next, out)
	case enforce.KindSlidingCounter:
		enforce.EvalSlidingCounter(c, p, now, commit, next, out)
	case enforce.KindLeakyBucket:
		enforce.EvalLeakyBucket(c, p, now, commit, next, out)
	default:
		enforce.EvalQuota(c, p, now, anchor, commit, next, out)
	}
}

// find returns the state of the limit named name in scope, or nil, whatever
// figures it was written under; key is the limit's key in a cached limit
// set, or nil. A state found by value under the same figures takes key, so
// that the next search compares pointers only.
func (sub *subjectState) find(key *limitKey, name string, p *enforce.Params, scope string) *limitState {
	if sub == nil {
		return nil
	}
	for i := range sub.numLimits() {
		st := sub.limitAt(i)
		// Most states are the subject's own (scope ""): a length test
		// settles them without a string comparison.
		stScope := st.scope()
		inScope := len(stScope) == len(scope) && (len(scope) == 0 || stScope == scope)
		if st.key == key {
			if inScope {
				return st
			}
			continue
		}
		if inScope && st.key.name == name {
			if key != nil && st.key.Figures == enforce.FiguresOf(p) {
				st.key = key
			}
			return st
		}
	}
	return nil
}
