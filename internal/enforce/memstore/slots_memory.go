package memstore

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
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
func slotKey(req *enforce.Request, l *enforce.Limit) string {
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
func (s *Store) AcquireSlots(ctx context.Context, req enforce.Request, lease time.Duration) (*enforce.Lease, enforce.Decision, error) {
	return s.slotsDecide(req, lease, true)
}

// peekSlots counts the slots in use without taking one.
func (s *Store) peekSlots(_ context.Context, req enforce.Request) (enforce.Decision, error) {
	_, d, err := s.slotsDecide(req, enforce.DefaultSlotLease, false)
	return d, err
}

// peekAll is Peek for a request with concurrency limits.
func (s *Store) peekAll(ctx context.Context, req enforce.Request) (enforce.Decision, error) {
	return enforce.PeekWithSlots(ctx, req, func(_ context.Context, r enforce.Request) (enforce.Decision, error) { return s.decide(&r, false, nil) }, s.peekSlots)
}

func (s *Store) slotsDecide(req enforce.Request, lease time.Duration, take bool) (*enforce.Lease, enforce.Decision, error) {
	if err := enforce.ValidateSlots(req, lease); err != nil {
		return nil, enforce.Decision{}, err
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
	d := enforce.Decision{At: time.UnixMicro(now), Layers: make([]enforce.LayerResult, len(req.Limits))}
	counts := make([]int64, len(req.Limits))
	for i, l := range req.Limits {
		set := sl.sets[keys[i]]
		counts[i] = liveLeases(set, now)
		d.Layers[i] = enforce.SlotOut(l, counts[i] < l.Limit, counts[i])
	}
	d.Allowed = enforce.SlotsAdmit(d.Layers)
	if !take || !d.Allowed {
		return nil, d, nil
	}
	sl.seq++
	l := &enforce.Lease{Holder: s, Kind: enforce.LeaseMemory, LeaseID: "m" + strconv.FormatUint(sl.seq, 10), Duration: lease, ExpiresAt: time.UnixMicro(now + lease.Microseconds())}
	for i := range req.Limits {
		if !d.Layers[i].Allowed {
			continue // a full shadow limit: no slot
		}
		set := sl.sets[keys[i]]
		if set == nil {
			set = make(map[string]int64, 1)
			sl.sets[keys[i]] = set
		}
		set[l.LeaseID] = now + lease.Microseconds()
		l.Keys = append(l.Keys, keys[i])
		d.Layers[i].Remaining = max(req.Limits[i].Limit-counts[i]-1, 0)
	}
	return l, d, nil
}

// ReleaseToken releases the lease a token names (see SlotStore).
func (s *Store) ReleaseToken(ctx context.Context, token string) error {
	kind, id, keys, err := enforce.ParseLeaseToken(token)
	if err != nil {
		return err
	}
	if kind != enforce.LeaseMemory {
		return fmt.Errorf("%w: lease token of another store", enforce.ErrInvalidRequest)
	}
	return s.ReleaseSlots(ctx, &enforce.Lease{LeaseID: id, Keys: keys})
}

func (s *Store) ReleaseSlots(_ context.Context, l *enforce.Lease) error {
	sl := &s.slots
	sl.mu.Lock()
	defer sl.mu.Unlock()
	for _, k := range l.Keys {
		if set := sl.sets[k]; set != nil {
			delete(set, l.LeaseID)
			if len(set) == 0 {
				delete(sl.sets, k)
			}
		}
	}
	return nil
}

func (s *Store) RenewSlots(_ context.Context, l *enforce.Lease) error {
	sl := &s.slots
	sl.mu.Lock()
	defer sl.mu.Unlock()
	now := s.clock()
	exp := now + l.Duration.Microseconds()
	// An expired lease stays lost (its slot may be another's now); a live
	// one that is missing (the redis store's rule: lost with its data) is
	// put back. Its term moves only when every slot was renewed.
	renewed := true
	for _, k := range l.Keys {
		set := sl.sets[k]
		old, ok := set[l.LeaseID]
		if !ok {
			old = l.ExpiresAt.UnixMicro()
		}
		if old <= now {
			renewed = false
			continue
		}
		if set == nil {
			set = map[string]int64{}
			sl.sets[k] = set
		}
		set[l.LeaseID] = exp
	}
	if renewed {
		l.ExpiresAt = time.UnixMicro(exp)
	}
	return nil
}
