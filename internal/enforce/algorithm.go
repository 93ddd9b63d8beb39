package enforce

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// ErrInvalidRequest means a Request cannot be decided: no subject, a subject
// that would break the Redis Cluster hash tag, or a limit with a missing name,
// an unknown algorithm, a non-positive limit or window, or duplicate names.
// It is a programming or configuration error, never a reason to admit.
var ErrInvalidRequest = errors.New("invalid rate-limit request")

// Both stores compute in integer microseconds since the Unix epoch (Redis TIME
// gives microseconds, and 1.8e15 is exact in the float64 of Redis's Lua), and
// where a fraction is unavoidable (the bucket algorithms' emission interval,
// the sliding counter's weight) they run the same float64 operations in the
// same order as scripts/decide.lua, so the two stores agree to the microsecond.
// Any change here must be mirrored there; the shared case table checks it.

// algorithm codes as the Lua script knows them.
const (
	codeFixedWindow  = "fw"
	codeSlidingLog   = "swl"
	codeSlidingCount = "swc"
	codeTokenBucket  = "tb"
	codeLeakyBucket  = "lb"
	// maxInlineLayers is how many layers a decision handles without a heap
	// allocation for its scratch space.
	maxInlineLayers = 4
)

// algKind is an Algorithm as a small integer, so the hot path switches on a
// byte instead of comparing strings.
type algKind uint8

const (
	kindFixedWindow algKind = iota + 1
	kindSlidingLog
	kindSlidingCounter
	kindTokenBucket
	kindLeakyBucket
	kindQuota
)

func kindOf(a Algorithm) algKind {
	switch a {
	case FixedWindow:
		return kindFixedWindow
	case SlidingWindowLog:
		return kindSlidingLog
	case SlidingWindowCounter:
		return kindSlidingCounter
	case TokenBucket:
		return kindTokenBucket
	case LeakyBucket:
		return kindLeakyBucket
	case Quota:
		return kindQuota
	}
	return 0
}

// code is the algorithm's name in the Lua script and in Redis keys.
func (k algKind) code() string {
	switch k {
	case kindFixedWindow:
		return codeFixedWindow
	case kindSlidingLog:
		return codeSlidingLog
	case kindSlidingCounter:
		return codeSlidingCount
	case kindTokenBucket:
		return codeTokenBucket
	case kindLeakyBucket:
		return codeLeakyBucket
	}
	return ""
}

// code is the limit's algorithm code in the script and in its figures: a
// quota's names its period.
func (p *params) code() string {
	if p.kind == kindQuota {
		return p.period
	}
	return p.kind.code()
}

// params is a Limit reduced to the integers both stores compute with.
type params struct {
	kind   algKind
	limit  int64
	window int64 // microseconds
	burst  int64 // token bucket capacity (defaulted) or leaky bucket queue depth
	cost   int64
	queue  bool
	shadow bool
	// period is a quota's period code (codeQuotaDay...), "" otherwise.
	period string
	// interval (T = W/limit, µs per unit of cost) and tolerance (burst*T)
	// are the bucket algorithms' figures, computed once per limit with the
	// same float64 operations the script runs per call.
	interval  float64
	tolerance float64
}

func paramsOf(l *Limit) (params, error) {
	p := params{kind: kindOf(l.Algorithm), limit: l.Limit, window: l.Window.Microseconds(), burst: l.Burst, cost: l.Cost, queue: l.Mode == ModeQueue, shadow: l.Mode == ModeShadow}
	if p.kind == kindQuota {
		// A quota's window is its period's longest length; its burst
		// slot carries the subject's anchor, given per request.
		p.window, p.burst, p.period = quotaSpan(l.Period), 0, periodCode(l.Period)
	}
	if l.Name == "" || p.kind == 0 || p.limit < 1 || p.window < 1 || p.burst < 0 || p.cost < 0 {
		return params{}, limitError(*l)
	}
	if p.cost == 0 {
		p.cost = 1
	}
	switch {
	case p.kind == kindTokenBucket && p.burst == 0:
		p.burst = p.limit
	case p.kind != kindTokenBucket && p.kind != kindLeakyBucket:
		p.burst = 0 // ignored (a quota's anchor comes per request)
	}
	p.interval = float64(p.window) / float64(p.limit)
	p.tolerance = float64(p.burst) * p.interval
	return p, nil
}

// limitError explains why paramsOf refused l; kept apart so the hot path
// stays small enough to inline.
func limitError(l Limit) error {
	switch {
	case l.Name == "":
		return fmt.Errorf("%w: limit without a name", ErrInvalidRequest)
	case l.Algorithm == Concurrency:
		return fmt.Errorf("%w: limit %q: %w", ErrInvalidRequest, l.Name, errSlotsAllow)
	case kindOf(l.Algorithm) == 0:
		return fmt.Errorf("%w: limit %q: unknown algorithm %q", ErrInvalidRequest, l.Name, l.Algorithm)
	case l.Limit < 1:
		return fmt.Errorf("%w: limit %q: limit %d below 1", ErrInvalidRequest, l.Name, l.Limit)
	case l.Algorithm == Quota && !l.Period.Valid():
		return fmt.Errorf("%w: limit %q: quota period %q: must be day, month or year", ErrInvalidRequest, l.Name, l.Period)
	case l.Window.Microseconds() < 1:
		return fmt.Errorf("%w: limit %q: window %s below 1µs", ErrInvalidRequest, l.Name, l.Window)
	default:
		return fmt.Errorf("%w: limit %q: negative burst or cost", ErrInvalidRequest, l.Name)
	}
}

// validateRequest checks what both stores need before touching state.
func validateRequest(req Request) error {
	if err := validateSubject(req.Subject); err != nil {
		return err
	}
	if strings.ContainsAny(req.Key, "{}") {
		return fmt.Errorf("%w: key %q contains a brace", ErrInvalidRequest, req.Key)
	}
	return validateLimitNames(req.Limits)
}

// validateSubject refuses a subject that cannot name counters.
func validateSubject(subject string) error {
	if subject == "" {
		return fmt.Errorf("%w: empty subject", ErrInvalidRequest)
	}
	if strings.IndexByte(subject, '{') >= 0 || strings.IndexByte(subject, '}') >= 0 {
		// A brace would end the Redis Cluster hash tag early and scatter one
		// subject's keys over several slots.
		return fmt.Errorf("%w: subject %q contains a brace", ErrInvalidRequest, subject)
	}
	return nil
}

// validateLimitNames refuses an empty limit set and one naming a limit
// twice (their counters would collide).
func validateLimitNames(limits []Limit) error {
	if len(limits) == 0 {
		return fmt.Errorf("%w: no limits", ErrInvalidRequest)
	}
	for i := range limits {
		for j := i + 1; j < len(limits); j++ {
			if limits[i].Name == limits[j].Name {
				return fmt.Errorf("%w: limit name %q used twice", ErrInvalidRequest, limits[i].Name)
			}
		}
	}
	return nil
}

// compileLimits validates a limit set as validateRequest and paramsOf do and
// appends each limit's params to dst.
func compileLimits(limits []Limit, dst []params) ([]params, error) {
	if err := validateLimitNames(limits); err != nil {
		return nil, err
	}
	for i := range limits {
		p, err := paramsOf(&limits[i])
		if err != nil {
			return nil, err
		}
		dst = append(dst, p)
	}
	return dst, nil
}

// layerOut is one layer's verdict in microseconds.
type layerOut struct {
	allowed   bool
	remaining int64
	reset     int64
	retry     int64
	wait      int64 // leaky bucket queue delay of an admitted request
	span      int64 // a quota's period length (LayerResult.Period)
}

func (o layerOut) result(l Limit) LayerResult {
	r := LayerResult{
		Limit:      l,
		Allowed:    o.allowed,
		Remaining:  o.remaining,
		ResetAfter: micros(o.reset),
	}
	if !o.allowed {
		r.RetryAfter = micros(max(o.retry, 1))
	}
	return r
}

// fill is result writing in place, sparing the hot path two copies of the
// Limit (and a copy of o, which stalls on the stores that just wrote it).
func (o *layerOut) fill(r *LayerResult, l *Limit) {
	r.Limit = *l
	r.Allowed = o.allowed
	r.Remaining = o.remaining
	r.ResetAfter = micros(o.reset)
	r.RetryAfter = 0
	r.Period = micros(o.span)
	if !o.allowed {
		r.RetryAfter = micros(max(o.retry, 1))
	}
}

// counterState is the scalar state of every algorithm but the sliding log:
// fixed window and quota (idx, count), sliding counter (idx, count = current
// window, prev), token and leaky bucket (tat, the virtual finish time in µs,
// kept in prev's place: see tat). 32 bytes, not the 40 of a tat of its own,
// so that a subject's counter, lock, last write and usage entry, everything a
// decision writes, share one cache line (see subjectState).
type counterState struct {
	idx, count int64
	// prev is the sliding counter's previous window's count; a bucket,
	// which uses no other field but has, keeps its tat's float64 bits here.
	prev int64
	has  bool
}

// tat is a token or leaky bucket's virtual finish time (µs); bucketState
// makes the state holding it.
func (s *counterState) tat() float64 { return math.Float64frombits(uint64(s.prev)) }

func bucketState(tat float64) counterState {
	return counterState{prev: int64(math.Float64bits(tat)), has: true}
}

// evalFixedWindow admits when the window's count plus cost stays within the
// limit; the window is floor(now/W).
func evalFixedWindow(s *counterState, p *params, now int64, commit bool, next *counterState, out *layerOut) {
	idx := now / p.window
	if s.has && s.idx == idx+1 {
		// The clock stepped back across a boundary (another instance's
		// request raced ahead): count in the stored window, never regress.
		// Any other index is stale and ignored below.
		idx, now = s.idx, s.idx*p.window
	}
	count := int64(0)
	if s.has && s.idx == idx {
		count = s.count
	}
	ok := count+p.cost <= p.limit
	if ok && commit {
		count += p.cost
		*next = counterState{idx: idx, count: count, has: true}
	}
	reset := (idx+1)*p.window - now
	*out = layerOut{allowed: ok, remaining: max(0, p.limit-count), reset: reset}
	if !ok {
		// A cost above the limit is never admitted; the next window is still
		// the honest earliest moment to try.
		out.retry = reset
	}
}

// evalSlidingCounter weights the previous window by the part of it still
// inside the sliding window: prev*(W-elapsed)/W + curr.
func evalSlidingCounter(s *counterState, p *params, now int64, commit bool, next *counterState, out *layerOut) {
	idx := now / p.window
	if s.has && s.idx == idx+1 {
		idx, now = s.idx, s.idx*p.window
	}
	var curr, prev int64
	if s.has {
		switch s.idx {
		case idx:
			curr, prev = s.count, s.prev
		case idx - 1:
			prev = s.count
		}
	}
	elapsed := now - idx*p.window
	w := float64(p.window)
	est := float64(prev)*float64(p.window-elapsed)/w + float64(curr)
	ok := est+float64(p.cost) <= float64(p.limit)
	if ok && commit {
		curr += p.cost
		est += float64(p.cost)
		*next = counterState{idx: idx, count: curr, prev: prev, has: true}
	}
	*out = layerOut{allowed: ok, remaining: max(0, int64(math.Floor(float64(p.limit)-est)))}
	switch {
	case curr > 0:
		out.reset = (idx+2)*p.window - now
	case prev > 0:
		out.reset = (idx+1)*p.window - now
	}
	if !ok {
		avail := p.limit - p.cost - curr
		switch {
		case avail >= 0 && prev > 0:
			// Within this window: prev*(W-e)/W <= avail.
			e := p.window - int64(math.Floor(float64(avail)*w/float64(prev)))
			out.retry = e - elapsed
		case p.limit-p.cost < 0 || curr == 0:
			out.retry = out.reset
		default:
			// Next window, where this window's count becomes prev.
			e := p.window - int64(math.Floor(float64(p.limit-p.cost)*w/float64(curr)))
			out.retry = (idx+1)*p.window - now + e
		}
	}
}

// evalTokenBucket is a token bucket kept as its GCRA equivalent: tat is when
// the bucket would be full again; tokens = burst - (tat-now)/T, T = W/limit.
func evalTokenBucket(s *counterState, p *params, now int64, commit bool, next *counterState, out *layerOut) {
	t := p.interval
	n := float64(now)
	base := n
	if s.has && s.tat() > n {
		base = s.tat()
	}
	tolerance := p.tolerance
	newTat := base + float64(p.cost)*t
	ok := newTat-n <= tolerance
	used := base - n
	if ok && commit {
		used = newTat - n
		*next = bucketState(newTat)
	}
	*out = layerOut{
		allowed:   ok,
		remaining: max(0, int64(math.Floor((tolerance-used)/t))),
		reset:     int64(math.Ceil(used)),
	}
	if !ok {
		out.retry = int64(math.Ceil(newTat - n - tolerance))
	}
}

// evalLeakyBucket shapes: tat is the virtual finish time of the queue; a
// request waits max(tat, now) - now and is admitted while that wait is at
// most burst*T (burst requests queued ahead of it). In ModeReject the same
// rule polices without waiting, so up to burst+1 requests pass back to back.
func evalLeakyBucket(s *counterState, p *params, now int64, commit bool, next *counterState, out *layerOut) {
	t := p.interval
	n := float64(now)
	base := n
	if s.has && s.tat() > n {
		base = s.tat()
	}
	tolerance := p.tolerance
	wait := base - n
	ok := wait <= tolerance
	depth := wait
	var delay int64
	if ok && commit {
		newTat := base + float64(p.cost)*t
		depth = newTat - n
		*next = bucketState(newTat)
		delay = int64(math.Ceil(wait))
	}
	*out = layerOut{
		allowed:   ok,
		remaining: max(0, int64(math.Floor((tolerance-depth)/t))+1),
		reset:     int64(math.Ceil(depth)),
		wait:      delay,
	}
	if !ok {
		out.retry = int64(math.Ceil(wait - tolerance))
	}
}

// expiresAt is when a counter state no longer matters, in µs.
func (s *counterState) expiresAt(p *params) int64 {
	switch p.kind {
	case kindFixedWindow:
		return (s.idx + 1) * p.window
	case kindSlidingCounter:
		return (s.idx + 2) * p.window
	case kindQuota:
		return s.idx + p.window // the period's start and its longest length
	default:
		return int64(math.Ceil(s.tat()))
	}
}

func micros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

// logEntry is one admitted request of a sliding log.
type logEntry struct{ ts, cost int64 }

// logRing is the memory store's sliding log: admitted requests in time order
// from head, and the sum of their costs.
type logRing struct {
	entries []logEntry
	head    int
	sum     int64
}

// live returns the cost inside (now-W, now] and the first entry in it, without
// changing the ring (Peek and rejected requests write nothing).
func (r *logRing) live(now, window int64) (sum int64, first int) {
	if r == nil {
		return 0, 0
	}
	sum, first = r.sum, r.head
	for first < len(r.entries) && r.entries[first].ts <= now-window {
		sum -= r.entries[first].cost
		first++
	}
	return sum, first
}

// evalSlidingLog admits when the cost logged in (now-W, now] plus this cost
// stays within the limit; rejected requests are not logged.
func evalSlidingLog(r *logRing, p *params, now int64, commit bool, out *layerOut) {
	sum, first := r.live(now, p.window)
	ok := sum+p.cost <= p.limit
	newest, hasNewest := int64(0), false
	if r != nil && first < len(r.entries) {
		newest, hasNewest = r.entries[len(r.entries)-1].ts, true
	}
	if ok && commit {
		sum += p.cost
		newest, hasNewest = now, true
	}
	*out = layerOut{allowed: ok, remaining: max(0, p.limit-sum)}
	if hasNewest {
		out.reset = newest + p.window - now
	}
	if !ok {
		out.retry = out.reset
		if p.cost <= p.limit {
			// Wait until enough of the oldest entries leave the window.
			need, freed := sum+p.cost-p.limit, int64(0)
			for i := first; i < len(r.entries); i++ {
				freed += r.entries[i].cost
				if freed >= need {
					out.retry = r.entries[i].ts + p.window - now
					break
				}
			}
		}
	}
}

// commit drops expired entries and logs an admitted request. The backing
// array is reused, so a steady subject allocates nothing.
func (r *logRing) commit(now, window, cost int64) {
	sum, first := r.live(now, window)
	r.sum, r.head = sum, first
	if r.head > 0 && r.head >= len(r.entries)/2 {
		n := copy(r.entries, r.entries[r.head:])
		r.entries = r.entries[:n]
		r.head = 0
	}
	r.entries = append(r.entries, logEntry{ts: now, cost: cost})
	r.sum += cost
}

// figures are what give a counter state its meaning: the algorithm and the
// window, limit and (buckets only, defaulted) burst it was made under. Both
// stores keep them beside the state, so a limit edited in place rescales its
// state at the next request instead of starting afresh or waiting for the
// old window to end.
type figures struct {
	kind                 algKind
	window, limit, burst int64
}

func figuresOf(p *params) figures {
	return figures{kind: p.kind, window: p.window, limit: p.limit, burst: p.burst}
}

// rescale returns s, made under the figures f, as a state of p at now. The
// rule is that what was spent stays spent, in units of cost: a window's
// counts carry into the window of the new size that holds now (a count whose
// window had already ended is dropped), and a bucket's debt, (tat-now)/T,
// is repaid at the new rate. So raising a limit, a window's rate or a burst
// admits at the next request, lowering one rejects at the next request, and
// neither waits for an old window or arrival time. Another algorithm starts
// afresh. scripts/decide.lua's rescale runs the same operations.
func rescale(s counterState, f figures, p *params, now int64) counterState {
	if !s.has {
		return s
	}
	if f.kind != p.kind {
		return counterState{}
	}
	switch p.kind {
	case kindQuota:
		if f.window != p.window {
			return counterState{} // another period
		}
		return s // the period's count, against whatever the limit is now
	case kindFixedWindow, kindSlidingCounter:
		if f.window == p.window {
			return s // a count is compared with whatever the limit is now
		}
		idx := now / f.window
		switch s.idx {
		case idx, idx + 1: // the current window (idx+1: the clock stepped back)
			return counterState{idx: now / p.window, count: s.count, prev: s.prev, has: true}
		case idx - 1:
			if p.kind == kindSlidingCounter {
				return counterState{idx: now / p.window, prev: s.count, has: true}
			}
		}
		return counterState{}
	default:
		n, tat := float64(now), s.tat()
		if (f.window == p.window && f.limit == p.limit) || tat <= n {
			return s // the same rate, or no debt: a burst change is in the tolerance
		}
		return bucketState(n + (tat-n)/(float64(f.window)/float64(f.limit))*p.interval)
	}
}
