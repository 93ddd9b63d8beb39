package memstore

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/internal/enforce"
)

// The memory store's usage series: per subject, one 16-byte entry per route
// and bucket that saw traffic. The latest entry lives inside the subject's
// state (subjectState.use0), so a decision in the same bucket and route as
// the one before it counts without touching another cache line; older
// entries, oldest first, in subjectExtra.usage. Routes are interned as small
// ids (routeNames). Against a slice of per-route series, each a slice of
// buckets, this took BenchmarkMemoryBytesPerSubject from 491 to 162 bytes
// together with the smaller subjectState and tables rebuilt half full, and
// two cache misses off every decision on a cold subject.

// usageEntry is one subject's traffic on one route during one bucket. An
// entry with no counts is empty (route ids start at 1).
type usageEntry struct {
	route uint32 // the route's id in the store's routeNames
	// bucket is the bucket's start in Unix seconds over the bucket's width
	// (int32: until the year 2650).
	bucket   int32
	admitted uint32
	rejected uint32
}

const (
	usageBucketMicros   = int64(enforce.UsageBucket / time.Microsecond)
	usageBucketSeconds  = int64(enforce.UsageBucket / time.Second)
	usageRetainsBuckets = int32(enforce.UsageRetention / enforce.UsageBucket)
)

func (e *usageEntry) empty() bool { return e.admitted == 0 && e.rejected == 0 }

// holds reports whether e counts route at now (µs): a multiplication, where
// finding now's bucket takes a division.
func (e *usageEntry) holds(route uint32, now int64) bool {
	start := int64(e.bucket) * usageBucketMicros
	return e.route == route && now >= start && now-start < usageBucketMicros
}

func (e *usageEntry) count(allowed bool) {
	// A uint32 holds a subject's decisions on one route for ten seconds at
	// 400 million a second; saturating keeps an impossible overflow from
	// wrapping to zero, which would read as an empty entry.
	if allowed {
		if e.admitted < ^uint32(0) {
			e.admitted++
		}
	} else if e.rejected < ^uint32(0) {
		e.rejected++
	}
}

// recordUsage counts a decision of sub on route at now (µs). Call it under
// sub's lock.
func (sub *subjectState) recordUsage(route uint32, now int64, allowed bool) {
	e := &sub.use0
	if !e.holds(route, now) || e.empty() {
		e = sub.usageEntry(route, now)
	}
	e.count(allowed)
}

// usageEntry returns the entry counting route at now, adding it when the
// subject has none: the new one becomes use0 and the previous use0 joins the
// older entries, from which those past UsageRetention are dropped first, so
// a subject holds at most one entry per route and bucket retained.
func (sub *subjectState) usageEntry(route uint32, now int64) *usageEntry {
	bucket := int32(enforce.UsageBucketStart(now/int64(time.Second/time.Microsecond)) / usageBucketSeconds)
	if sub.use0.empty() {
		sub.use0 = usageEntry{route: route, bucket: bucket}
		return &sub.use0
	}
	if sub.use0.route == route && sub.use0.bucket == bucket {
		return &sub.use0
	}
	ex := sub.more()
	// The older entries are in time order, so the bucket's own ones are at
	// the end.
	for i := len(ex.usage) - 1; i >= 0 && ex.usage[i].bucket >= bucket; i-- {
		if ex.usage[i].route == route && ex.usage[i].bucket == bucket {
			return &ex.usage[i]
		}
	}
	oldest := bucket - usageRetainsBuckets
	drop := 0
	for drop < len(ex.usage) && ex.usage[drop].bucket < oldest {
		drop++
	}
	if drop > 0 {
		ex.usage = ex.usage[:copy(ex.usage, ex.usage[drop:])]
	}
	if sub.use0.bucket >= oldest {
		ex.usage = append(ex.usage, sub.use0)
	}
	sub.use0 = usageEntry{route: route, bucket: bucket}
	return &sub.use0
}

// eachUsage calls f with every usage entry of sub, oldest first. Call it
// under sub's lock.
func (sub *subjectState) eachUsage(f func(e *usageEntry)) {
	if sub.extra != nil {
		for i := range sub.extra.usage {
			f(&sub.extra.usage[i])
		}
	}
	if !sub.use0.empty() {
		f(&sub.use0)
	}
}

// routeCacheSlots is the size of routeNames' cache: far more than the routes
// an API has, so that collisions stay rare.
const routeCacheSlots = 256

// maxUsageRoutes bounds the routes the usage series name: a store fed
// routes from outside (a gateway's descriptors) stays bounded, and the
// routes beyond it are counted together under otherRoutes.
const maxUsageRoutes = 1 << 16

// otherRoutes is the route the usage of routes beyond maxUsageRoutes is
// counted under.
const otherRoutes = "(other routes)"

// routeNames interns the routes the memory store counts usage under as ids
// from 1, so a usage entry holds 4 bytes for its route instead of a 16-byte
// string header and compares an integer. A route string passed again and
// again (a ServeMux pattern) is found by its address in a direct-mapped
// cache, without hashing it; any other goes through the map, under a lock.
type routeNames struct {
	cache [routeCacheSlots]atomic.Pointer[routeName]
	mu    sync.Mutex
	ids   map[string]*routeName
	names []string // index id-1, under mu
}

type routeName struct {
	name string
	id   uint32
}

// id returns route's id, interning it on first sight.
func (r *routeNames) id(route string) uint32 {
	slot := &r.cache[uint64(uintptr(unsafe.Pointer(unsafe.StringData(route))))*0x9E3779B97F4A7C15>>(64-8)]
	if n := slot.Load(); n != nil && sameString(n.name, route) {
		return n.id
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.ids[route]
	if n == nil {
		name := route
		if len(r.names) >= maxUsageRoutes-1 {
			name, n = otherRoutes, r.ids[otherRoutes]
		}
		if n == nil {
			if r.ids == nil {
				r.ids = make(map[string]*routeName)
			}
			r.names = append(r.names, name)
			n = &routeName{name: name, id: uint32(len(r.names))}
			r.ids[name] = n
		}
	}
	slot.Store(n)
	return n.id
}

// name returns the route interned as id.
func (r *routeNames) name(id uint32) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.names[id-1]
}

// Usage returns the usage of subjects in the buckets that end after since,
// ordered by subject, route and bucket.
func (s *Store) Usage(ctx context.Context, subjects []string, since time.Time) ([]enforce.UsagePoint, error) {
	from := enforce.UsageBucketStart(since.Unix())
	var points []enforce.UsagePoint
	for _, subject := range subjects {
		sh, h := s.locate(subject)
		if sub := sh.get(h, subject); sub != nil {
			sub.mu.Lock()
			sub.eachUsage(func(e *usageEntry) {
				if start := int64(e.bucket) * usageBucketSeconds; start >= from {
					points = append(points, enforce.UsagePoint{
						Subject: subject, Route: s.routes.name(e.route), Bucket: time.Unix(start, 0).UTC(),
						Admitted: int64(e.admitted), Rejected: int64(e.rejected),
					})
				}
			})
			sub.mu.Unlock()
		}
	}
	enforce.SortUsage(points)
	return points, nil
}
