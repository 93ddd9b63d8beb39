package enforce

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// memSlots is the memory store's concurrency slots: per limit (and key,
// for a PerKey limit) the live leases and their expiry in µs. One lock
// covers all of them: a slot is taken and given back once per request,
// far less often than the rate layers are decided, and one lock keeps an
// acquisition over several limits trivially all or nothing.
type memSlots struct {
	mu   sync.Mutex
	sets map[string]map[string]int64
	seq  uint64
	// sweepAt is when (µs) every set is next swept of expired leases, so
	// that the sets of subjects that never come back are dropped too.
	sweepAt int64
}

// slotSweepEvery is how often (µs) the memory store drops expired leases
// of sets no acquisition has touched.
const slotSweepEvery = int64(time.Minute / time.Microsecond)

// slotKey names the slot set of req's i-th limit.
func slotKey(req *Request, l *Limit) string {
	scope := ""
	if l.PerKey {
		scope = req.Key
	}
	return req.Subject + "\x00" + scope + "\x00" + l.Name
}

// live drops the expired leases of set and counts the others.
func liveLeases(set map[string]int64, now int64) int64 {
	for id, exp := range set {
		if exp <= now {
			delete(set, id)
		}
	}
	return int64(len(set))
}

// AcquireSlots takes a slot of every concurrency limit of req (see
// SlotStore).
func (s *MemoryStore) AcquireSlots(ctx context.Context, req Request, lease time.Duration) (*Lease, Decision, error) {
	return s.slotsDecide(req, lease, true)
}

// peekSlots counts the slots in use without taking one.
func (s *MemoryStore) peekSlots(_ context.Context, req Request) (Decision, error) {
	_, d, err := s.slotsDecide(req, DefaultSlotLease, false)
	return d, err
}

// peekAll is Peek for a request with concurrency limits.
func (s *MemoryStore) peekAll(ctx context.Context, req Request) (Decision, error) {
	return peekWithSlots(ctx, req, func(_ context.Context, r Request) (Decision, error) { return s.decide(&r, false, nil) }, s.peekSlots)
}

func (s *MemoryStore) slotsDecide(req Request, lease time.Duration, take bool) (*Lease, Decision, error) {
	if err := validateSlots(req, lease); err != nil {
		return nil, Decision{}, err
	}
	sl := &s.slots
	keys := make([]string, len(req.Limits))
	for i := range req.Limits {
		keys[i] = slotKey(&req, &req.Limits[i])
	}
	sl.mu.Lock()
	defer sl.mu.Unlock()
	now := s.clock()
	if sl.sets == nil {
		sl.sets = make(map[string]map[string]int64)
	}
	if now >= sl.sweepAt {
		for k, set := range sl.sets {
			if liveLeases(set, now) == 0 {
				delete(sl.sets, k)
			}
		}
		sl.sweepAt = now + slotSweepEvery
	}
	d := Decision{At: time.UnixMicro(now), Layers: make([]LayerResult, len(req.Limits))}
	counts := make([]int64, len(req.Limits))
	for i, l := range req.Limits {
		set := sl.sets[keys[i]]
		counts[i] = liveLeases(set, now)
		d.Layers[i] = slotOut(l, counts[i] < l.Limit, counts[i])
	}
	d.Allowed = slotsAdmit(d.Layers)
	if !take || !d.Allowed {
		return nil, d, nil
	}
	sl.seq++
	l := &Lease{holder: s, kind: leaseMemory, id: "m" + strconv.FormatUint(sl.seq, 10), lease: lease, expires: time.UnixMicro(now + lease.Microseconds())}
	for i := range req.Limits {
		if !d.Layers[i].Allowed {
			continue // a full shadow limit: no slot
		}
		set := sl.sets[keys[i]]
		if set == nil {
			set = make(map[string]int64, 1)
			sl.sets[keys[i]] = set
		}
		set[l.id] = now + lease.Microseconds()
		l.keys = append(l.keys, keys[i])
		d.Layers[i].Remaining = max(req.Limits[i].Limit-counts[i]-1, 0)
	}
	return l, d, nil
}

// ReleaseToken releases the lease a token names (see SlotStore).
func (s *MemoryStore) ReleaseToken(ctx context.Context, token string) error {
	kind, id, keys, err := parseLeaseToken(token)
	if err != nil {
		return err
	}
	if kind != leaseMemory {
		return fmt.Errorf("%w: lease token of another store", ErrInvalidRequest)
	}
	return s.releaseSlots(ctx, &Lease{id: id, keys: keys})
}

func (s *MemoryStore) releaseSlots(_ context.Context, l *Lease) error {
	sl := &s.slots
	sl.mu.Lock()
	defer sl.mu.Unlock()
	for _, k := range l.keys {
		if set := sl.sets[k]; set != nil {
			delete(set, l.id)
			if len(set) == 0 {
				delete(sl.sets, k)
			}
		}
	}
	return nil
}

func (s *MemoryStore) renewSlots(_ context.Context, l *Lease) error {
	sl := &s.slots
	sl.mu.Lock()
	defer sl.mu.Unlock()
	now := s.clock()
	exp := now + l.lease.Microseconds()
	for _, k := range l.keys {
		if set := sl.sets[k]; set != nil {
			if old, ok := set[l.id]; ok && old > now {
				set[l.id] = exp // an expired lease stays lost: its slot may be another's now
			}
		}
	}
	l.expires = time.UnixMicro(exp)
	return nil
}
