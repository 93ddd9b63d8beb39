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
	CodeFixedWindow  = "fw"
	CodeSlidingLog   = "swl"
	CodeSlidingCount = "swc"
	CodeTokenBucket  = "tb"
	CodeLeakyBucket  = "lb"
	// maxInlineLayers is how many layers a decision handles without a heap
	// allocation for its scratch space.
	MaxInlineLayers = 4
)

// algKind is an Algorithm as a small integer, so the hot path switches on a
// byte instead of comparing strings.
type AlgKind uint8

const (
	KindFixedWindow AlgKind = iota + 1
	KindSlidingLog
	KindSlidingCounter
	KindTokenBucket
	KindLeakyBucket
	KindQuota
)

func kindOf(a Algorithm) AlgKind {
	switch a {
	case FixedWindow:
		return KindFixedWindow
	case SlidingWindowLog:
		return KindSlidingLog
	case SlidingWindowCounter:
		return KindSlidingCounter
	case TokenBucket:
		return KindTokenBucket
	case LeakyBucket:
		return KindLeakyBucket
	case Quota:
		return KindQuota
	}
	return 0
}

// code is the algorithm's name in the Lua script and in Redis keys.
func (k AlgKind) Code() string {
	switch k {
	case KindFixedWindow:
		return CodeFixedWindow
	case KindSlidingLog:
		return CodeSlidingLog
	case KindSlidingCounter:
		return CodeSlidingCount
	case KindTokenBucket:
		return CodeTokenBucket
	case KindLeakyBucket:
		return CodeLeakyBucket
	}
	return ""
}

// code is the limit's algorithm code in the script and in its figures: a
// quota's names its period.
func (p *Params) Code() string {
	if p.Kind == KindQuota {
		return p.Period
	}
	return p.Kind.Code()
}

// params is a Limit reduced to the integers both stores compute with.
type Params struct {
	Kind   AlgKind
	Limit  int64
	Window int64 // microseconds
	Burst  int64 // token bucket capacity (defaulted) or leaky bucket queue depth
	Cost   int64
	Queue  bool
	Shadow bool
	// period is a quota's period code (codeQuotaDay...), "" otherwise.
	Period string
	// interval (T = W/limit, µs per unit of cost) and tolerance (burst*T)
	// are the bucket algorithms' figures, computed once per limit with the
	// same float64 operations the script runs per call.
	Interval  float64
	Tolerance float64
}

func ParamsOf(l *Limit) (Params, error) {
	p := Params{Kind: kindOf(l.Algorithm), Limit: l.Limit, Window: l.Window.Microseconds(), Burst: l.Burst, Cost: l.Cost, Queue: l.Mode == ModeQueue, Shadow: l.Mode == ModeShadow}
	if p.Kind == KindQuota {
		// A quota's window is its period's longest length; its burst
		// slot carries the subject's anchor, given per request.
		p.Window, p.Burst, p.Period = quotaSpan(l.Period), 0, PeriodCode(l.Period)
	}
	if l.Name == "" || p.Kind == 0 || p.Limit < 1 || p.Window < 1 || p.Burst < 0 || p.Cost < 0 {
		return Params{}, limitError(*l)
	}
	if p.Cost == 0 {
		p.Cost = 1
	}
	switch {
	case p.Kind == KindTokenBucket && p.Burst == 0:
		p.Burst = p.Limit
	case p.Kind != KindTokenBucket && p.Kind != KindLeakyBucket:
		p.Burst = 0 // ignored (a quota's anchor comes per request)
	}
	p.Interval = float64(p.Window) / float64(p.Limit)
	p.Tolerance = float64(p.Burst) * p.Interval
	return p, nil
}

// limitError explains why paramsOf refused l; kept apart so the hot path
// stays small enough to inline.
func limitError(l Limit) error {
	switch {
	case l.Name == "":
		return fmt.Errorf("%w: limit without a name", ErrInvalidRequest)
	case l.Algorithm == Concurrency:
		return fmt.Errorf("%w: limit %q: %w", ErrInvalidRequest, l.Name, ErrSlotsAllow)
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
func ValidateRequest(req Request) error {
	if err := ValidateSubject(req.Subject); err != nil {
		return err
	}
	if strings.ContainsAny(req.Key, "{}") {
		return fmt.Errorf("%w: key %q contains a brace", ErrInvalidRequest, req.Key)
	}
	return validateLimitNames(req.Limits)
}

// validateSubject refuses a subject that cannot name counters.
func ValidateSubject(subject string) error {
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
func CompileLimits(limits []Limit, dst []Params) ([]Params, error) {
	if err := validateLimitNames(limits); err != nil {
		return nil, err
	}
	for i := range limits {
		p, err := ParamsOf(&limits[i])
		if err != nil {
			return nil, err
		}
		dst = append(dst, p)
	}
	return dst, nil
}

// layerOut is one layer's verdict in microseconds.
type LayerOut struct {
	Allowed   bool
	Remaining int64
	Reset     int64
	Retry     int64
	Wait      int64 // leaky bucket queue delay of an admitted request
	Span      int64 // a quota's period length (LayerResult.Period)
}

func (o LayerOut) Result(l Limit) LayerResult {
	r := LayerResult{
		Limit:      l,
		Allowed:    o.Allowed,
		Remaining:  o.Remaining,
		ResetAfter: Micros(o.Reset),
	}
	if !o.Allowed {
		r.RetryAfter = Micros(max(o.Retry, 1))
	}
	return r
}

// fill is result writing in place, sparing the hot path two copies of the
// Limit (and a copy of o, which stalls on the stores that just wrote it).
func (o *LayerOut) Fill(r *LayerResult, l *Limit) {
	r.Limit = *l
	r.Allowed = o.Allowed
	r.Remaining = o.Remaining
	r.ResetAfter = Micros(o.Reset)
	r.RetryAfter = 0
	r.Period = Micros(o.Span)
	if !o.Allowed {
		r.RetryAfter = Micros(max(o.Retry, 1))
	}
}

// counterState is the scalar state of every algorithm but the sliding log:
// fixed window and quota (idx, count), sliding counter (idx, count = current
// window, prev), token and leaky bucket (tat, the virtual finish time in µs,
// kept in prev's place: see tat). 32 bytes, not the 40 of a tat of its own,
// so that a subject's counter, lock, last write and usage entry, everything a
// decision writes, share one cache line (see subjectState).
type CounterState struct {
	Idx, Count int64
	// prev is the sliding counter's previous window's count; a bucket,
	// which uses no other field but has, keeps its tat's float64 bits here.
	Prev int64
	Has  bool
}

// tat is a token or leaky bucket's virtual finish time (µs); bucketState
// makes the state holding it.
func (s *CounterState) Tat() float64 { return math.Float64frombits(uint64(s.Prev)) }

func BucketState(Tat float64) CounterState {
	return CounterState{Prev: int64(math.Float64bits(Tat)), Has: true}
}

// evalFixedWindow admits when the window's count plus cost stays within the
// limit; the window is floor(now/W).
func EvalFixedWindow(s *CounterState, p *Params, now int64, Commit bool, next *CounterState, out *LayerOut) {
	Idx := now / p.Window
	if s.Has && s.Idx == Idx+1 {
		// The clock stepped back across a boundary (another instance's
		// request raced ahead): count in the stored window, never regress.
		// Any other index is stale and ignored below.
		Idx, now = s.Idx, s.Idx*p.Window
	}
	Count := int64(0)
	if s.Has && s.Idx == Idx {
		Count = s.Count
	}
	ok := Count+p.Cost <= p.Limit
	if ok && Commit {
		Count += p.Cost
		*next = CounterState{Idx: Idx, Count: Count, Has: true}
	}
	Reset := (Idx+1)*p.Window - now
	*out = LayerOut{Allowed: ok, Remaining: max(0, p.Limit-Count), Reset: Reset}
	if !ok {
		// A cost above the limit is never admitted; the next window is still
		// the honest earliest moment to try.
		out.Retry = Reset
	}
}

// evalSlidingCounter weights the previous window by the part of it still
// inside the sliding window: prev*(W-elapsed)/W + curr.
func EvalSlidingCounter(s *CounterState, p *Params, now int64, Commit bool, next *CounterState, out *LayerOut) {
	Idx := now / p.Window
	if s.Has && s.Idx == Idx+1 {
		Idx, now = s.Idx, s.Idx*p.Window
	}
	var curr, Prev int64
	if s.Has {
		switch s.Idx {
		case Idx:
			curr, Prev = s.Count, s.Prev
		case Idx - 1:
			Prev = s.Count
		}
	}
	elapsed := now - Idx*p.Window
	w := float64(p.Window)
	est := float64(Prev)*float64(p.Window-elapsed)/w + float64(curr)
	ok := est+float64(p.Cost) <= float64(p.Limit)
	if ok && Commit {
		curr += p.Cost
		est += float64(p.Cost)
		*next = CounterState{Idx: Idx, Count: curr, Prev: Prev, Has: true}
	}
	*out = LayerOut{Allowed: ok, Remaining: max(0, int64(math.Floor(float64(p.Limit)-est)))}
	switch {
	case curr > 0:
		out.Reset = (Idx+2)*p.Window - now
	case Prev > 0:
		out.Reset = (Idx+1)*p.Window - now
	}
	if !ok {
		avail := p.Limit - p.Cost - curr
		switch {
		case avail >= 0 && Prev > 0:
			// Within this window: prev*(W-e)/W <= avail.
			e := p.Window - int64(math.Floor(float64(avail)*w/float64(Prev)))
			out.Retry = e - elapsed
		case p.Limit-p.Cost < 0 || curr == 0:
			out.Retry = out.Reset
		default:
			// Next window, where this window's count becomes prev.
			e := p.Window - int64(math.Floor(float64(p.Limit-p.Cost)*w/float64(curr)))
			out.Retry = (Idx+1)*p.Window - now + e
		}
	}
}

// evalTokenBucket is a token bucket kept as its GCRA equivalent: tat is when
// the bucket would be full again; tokens = burst - (tat-now)/T, T = W/limit.
func EvalTokenBucket(s *CounterState, p *Params, now int64, Commit bool, next *CounterState, out *LayerOut) {
	t := p.Interval
	n := float64(now)
	base := n
	if s.Has && s.Tat() > n {
		base = s.Tat()
	}
	Tolerance := p.Tolerance
	newTat := base + float64(p.Cost)*t
	ok := newTat-n <= Tolerance
	used := base - n
	if ok && Commit {
		used = newTat - n
		*next = BucketState(newTat)
	}
	*out = LayerOut{
		Allowed:   ok,
		Remaining: max(0, int64(math.Floor((Tolerance-used)/t))),
		Reset:     int64(math.Ceil(used)),
	}
	if !ok {
		out.Retry = int64(math.Ceil(newTat - n - Tolerance))
	}
}

// evalLeakyBucket shapes: tat is the virtual finish time of the queue; a
// request waits max(tat, now) - now and is admitted while that wait is at
// most burst*T (burst requests queued ahead of it). In ModeReject the same
// rule polices without waiting, so up to burst+1 requests pass back to back.
func EvalLeakyBucket(s *CounterState, p *Params, now int64, Commit bool, next *CounterState, out *LayerOut) {
	t := p.Interval
	n := float64(now)
	base := n
	if s.Has && s.Tat() > n {
		base = s.Tat()
	}
	Tolerance := p.Tolerance
	Wait := base - n
	ok := Wait <= Tolerance
	depth := Wait
	var delay int64
	if ok && Commit {
		newTat := base + float64(p.Cost)*t
		depth = newTat - n
		*next = BucketState(newTat)
		delay = int64(math.Ceil(Wait))
	}
	*out = LayerOut{
		Allowed:   ok,
		Remaining: max(0, int64(math.Floor((Tolerance-depth)/t))+1),
		Reset:     int64(math.Ceil(depth)),
		Wait:      delay,
	}
	if !ok {
		out.Retry = int64(math.Ceil(Wait - Tolerance))
	}
}

// expiresAt is when a counter state no longer matters, in µs.
func (s *CounterState) ExpiresAt(p *Params) int64 {
	switch p.Kind {
	case KindFixedWindow:
		return (s.Idx + 1) * p.Window
	case KindSlidingCounter:
		return (s.Idx + 2) * p.Window
	case KindQuota:
		return s.Idx + p.Window // the period's start and its longest length
	default:
		return int64(math.Ceil(s.Tat()))
	}
}

func Micros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

// logEntry is one admitted request of a sliding log.
type LogEntry struct{ TS, Cost int64 }

// logRing is the memory store's sliding log: admitted requests in time order
// from head, and the sum of their costs.
type LogRing struct {
	Entries []LogEntry
	Head    int
	Sum     int64
}

// live returns the cost inside (now-W, now] and the first entry in it, without
// changing the ring (Peek and rejected requests write nothing).
func (r *LogRing) Live(now, Window int64) (Sum int64, first int) {
	if r == nil {
		return 0, 0
	}
	Sum, first = r.Sum, r.Head
	for first < len(r.Entries) && r.Entries[first].TS <= now-Window {
		Sum -= r.Entries[first].Cost
		first++
	}
	return Sum, first
}

// evalSlidingLog admits when the cost logged in (now-W, now] plus this cost
// stays within the limit; rejected requests are not logged.
func EvalSlidingLog(r *LogRing, p *Params, now int64, Commit bool, out *LayerOut) {
	Sum, first := r.Live(now, p.Window)
	ok := Sum+p.Cost <= p.Limit
	newest, hasNewest := int64(0), false
	if r != nil && first < len(r.Entries) {
		newest, hasNewest = r.Entries[len(r.Entries)-1].TS, true
	}
	if ok && Commit {
		Sum += p.Cost
		newest, hasNewest = now, true
	}
	*out = LayerOut{Allowed: ok, Remaining: max(0, p.Limit-Sum)}
	if hasNewest {
		out.Reset = newest + p.Window - now
	}
	if !ok {
		out.Retry = out.Reset
		if p.Cost <= p.Limit {
			// Wait until enough of the oldest entries leave the window.
			need, freed := Sum+p.Cost-p.Limit, int64(0)
			for i := first; i < len(r.Entries); i++ {
				freed += r.Entries[i].Cost
				if freed >= need {
					out.Retry = r.Entries[i].TS + p.Window - now
					break
				}
			}
		}
	}
}

// commit drops expired entries and logs an admitted request. The backing
// array is reused, so a steady subject allocates nothing.
func (r *LogRing) Commit(now, Window, Cost int64) {
	Sum, first := r.Live(now, Window)
	r.Sum, r.Head = Sum, first
	if r.Head > 0 && r.Head >= len(r.Entries)/2 {
		n := copy(r.Entries, r.Entries[r.Head:])
		r.Entries = r.Entries[:n]
		r.Head = 0
	}
	r.Entries = append(r.Entries, LogEntry{TS: now, Cost: Cost})
	r.Sum += Cost
}

// figures are what give a counter state its meaning: the algorithm and the
// window, limit and (buckets only, defaulted) burst it was made under. Both
// stores keep them beside the state, so a limit edited in place rescales its
// state at the next request instead of starting afresh or waiting for the
// old window to end.
type Figures struct {
	Kind                 AlgKind
	Window, Limit, Burst int64
}

func FiguresOf(p *Params) Figures {
	return Figures{Kind: p.Kind, Window: p.Window, Limit: p.Limit, Burst: p.Burst}
}

// rescale returns s, made under the figures f, as a state of p at now. The
// rule is that what was spent stays spent, in units of cost: a window's
// counts carry into the window of the new size that holds now (a count whose
// window had already ended is dropped), and a bucket's debt, (tat-now)/T,
// is repaid at the new rate. So raising a limit, a window's rate or a burst
// admits at the next request, lowering one rejects at the next request, and
// neither waits for an old window or arrival time. Another algorithm starts
// afresh. scripts/decide.lua's rescale runs the same operations.
func Rescale(s CounterState, f Figures, p *Params, now int64) CounterState {
	if !s.Has {
		return s
	}
	if f.Kind != p.Kind {
		return CounterState{}
	}
	switch p.Kind {
	case KindQuota:
		if f.Window != p.Window {
			return CounterState{} // another period
		}
		return s // the period's count, against whatever the limit is now
	case KindFixedWindow, KindSlidingCounter:
		if f.Window == p.Window {
			return s // a count is compared with whatever the limit is now
		}
		Idx := now / f.Window
		switch s.Idx {
		case Idx, Idx + 1: // the current window (idx+1: the clock stepped back)
			return CounterState{Idx: now / p.Window, Count: s.Count, Prev: s.Prev, Has: true}
		case Idx - 1:
			if p.Kind == KindSlidingCounter {
				return CounterState{Idx: now / p.Window, Prev: s.Count, Has: true}
			}
		}
		return CounterState{}
	default:
		n, Tat := float64(now), s.Tat()
		if (f.Window == p.Window && f.Limit == p.Limit) || Tat <= n {
			return s // the same rate, or no debt: a burst change is in the tolerance
		}
		return BucketState(n + (Tat-n)/(float64(f.Window)/float64(f.Limit))*p.Interval)
	}
}
