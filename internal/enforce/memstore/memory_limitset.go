package memstore

import (
	"slices"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/internal/enforce"
)

// limitSetSlots is the size of a store's table of validated limit slices:
// far more than the distinct slices a control plane hands out at once (one
// per plan and route tier), so that collisions stay rare.
const limitSetSlots = 512

// limitSetCache remembers validated limit slices by the address of their
// first element, in a direct-mapped table of limitSetSlots. A slice is
// compiled into the table the second time it is seen, so a caller that
// builds a fresh slice for every request costs no allocation either.
type limitSetCache struct {
	slots [limitSetSlots]limitSetSlot
}

type limitSetSlot struct {
	set atomic.Pointer[limitSet]
	// seen is the first element of the slice last validated here without
	// being compiled; keeping it also keeps its address from being reused.
	seen atomic.Pointer[enforce.Limit]
}

// limitSet is a validated limit slice: a copy of its limits as validated,
// to detect a slice edited in place, their params and their state keys.
type limitSet struct {
	first  *enforce.Limit
	limits []enforce.Limit
	params []enforce.Params
	keys   []limitKey
	// oneCounter is set for one limit that is neither a sliding log nor
	// PerKey, the plans allowOne decides.
	oneCounter bool
}

// get returns the compiled set of limits when the cache holds this slice
// with these contents, else nil.
func (c *limitSetCache) get(limits []enforce.Limit) *limitSet {
	if len(limits) == 0 {
		return nil
	}
	set := c.slots[slotOf(&limits[0])].set.Load()
	if set == nil || set.first != &limits[0] || len(set.limits) != len(limits) {
		return nil
	}
	for i := range limits {
		if !sameLimit(&set.limits[i], &limits[i]) {
			return nil
		}
	}
	return set
}

// compile validates limits, appending their params to buf. The second time
// in a row it sees a slice it caches it and returns the set's params and
// keys; otherwise keys is nil.
func (c *limitSetCache) compile(limits []enforce.Limit, buf []enforce.Params) (ps []enforce.Params, keys []limitKey, err error) {
	ps, err = enforce.CompileLimits(limits, buf)
	if err != nil {
		return nil, nil, err
	}
	first := &limits[0]
	slot := &c.slots[slotOf(first)]
	if slot.seen.Load() != first {
		slot.seen.Store(first)
		return ps, nil, nil
	}
	set := &limitSet{first: first, limits: slices.Clone(limits), params: slices.Clone(ps), keys: make([]limitKey, len(ps))}
	for i := range set.keys {
		set.keys[i] = newLimitKey(&set.limits[i], &set.params[i])
	}
	set.oneCounter = len(ps) == 1 && ps[0].Kind != enforce.KindSlidingLog && !limits[0].PerKey
	slot.set.Store(set)
	return set.params, set.keys, nil
}

// sameLimit reports whether a and b decide alike: every field but Route,
// which the store does not read. Strings are compared by address first, as
// a snapshot's limits share them.
func sameLimit(a, b *enforce.Limit) bool {
	return a.Limit == b.Limit && a.Window == b.Window && a.Burst == b.Burst && a.Cost == b.Cost && a.PerKey == b.PerKey &&
		a.Period == b.Period &&
		sameString(a.Name, b.Name) && sameString(string(a.Algorithm), string(b.Algorithm)) &&
		sameString(string(a.Mode), string(b.Mode))
}

func sameString(a, b string) bool {
	return len(a) == len(b) && (unsafe.StringData(a) == unsafe.StringData(b) || a == b)
}

// slotOf spreads element addresses, which share their low bits, over the
// table (Fibonacci hashing).
func slotOf(first *enforce.Limit) uint64 {
	const bits = 9 // log2(limitSetSlots)
	return uint64(uintptr(unsafe.Pointer(first))) * 0x9E3779B97F4A7C15 >> (64 - bits)
}

// wallClock reads the wall clock in µs since the Unix epoch with one
// monotonic clock read (time.Since on a time carrying a monotonic reading)
// instead of time.Now's two (wall and monotonic). It re-reads the wall clock
// every second, so a stepped system clock is followed within a second as it
// would be by time.Now.
type wallClock struct {
	base   time.Time    // carries a monotonic reading
	offset atomic.Int64 // wall-clock ns at base, as last measured
	renew  atomic.Int64 // ns since base when the offset is measured again
}

const wallClockRenew = int64(time.Second)

func (c *wallClock) anchor() {
	c.base = time.Now()
	c.offset.Store(c.base.UnixNano())
	c.renew.Store(wallClockRenew)
}

func (c *wallClock) micros() int64 {
	since := int64(time.Since(c.base))
	if since >= c.renew.Load() {
		now := time.Now()
		since = int64(now.Sub(c.base)) // monotonic
		c.offset.Store(now.UnixNano() - since)
		c.renew.Store(since + wallClockRenew)
	}
	return (c.offset.Load() + since) / int64(time.Microsecond)
}
