package enforce

import (
	"sort"
	"time"
)

// Usage statistics: both stores count admitted and rejected requests per
// subject and route in 10-second buckets, kept for 65 minutes, so the
// dashboards can draw the last hour. The Redis store tallies them in memory
// and adds them to Redis once per redisstore.Options.UsageFlush (default a second),
// so other instances see a store's counts up to that late and a crash loses
// at most that much; its own Usage flushes first and is exact. Peek counts
// nothing.
const (
	// UsageBucket is the width of one usage bucket.
	UsageBucket = 10 * time.Second
	// UsageRetention is how long usage buckets are kept.
	UsageRetention = 65 * time.Minute
)

// UsagePoint is one subject's traffic on one route during one bucket.
type UsagePoint struct {
	Subject string
	// Route is the matched ServeMux pattern the requests carried.
	Route string
	// Bucket is the start of the UsageBucket the counts belong to.
	Bucket   time.Time
	Admitted int64
	Rejected int64
}

// UsageBucketStart is the start of the bucket holding t, in Unix seconds.
func UsageBucketStart(unixSeconds int64) int64 {
	width := int64(UsageBucket / time.Second)
	return unixSeconds - unixSeconds%width
}

// SortUsage orders points by subject, route and bucket.
func SortUsage(points []UsagePoint) {
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

// Tallier is a store that counts, in the usage statistics its Usage reads,
// a decision it did not make through Allow: a request refused by its
// concurrency slots (whose rate layers were only peeked), or admitted by
// slots alone, or decided from a lease.
type Tallier interface {
	Tally(req Request, allowed bool)
}

// TallyOf returns the Tallier of store or of the first store it wraps
// (Unwrap) that has one, or nil.
func TallyOf(store Store) Tallier {
	for store != nil {
		if t, ok := store.(Tallier); ok {
			return t
		}
		u, ok := store.(interface{ Unwrap() Store })
		if !ok {
			return nil
		}
		store = u.Unwrap()
	}
	return nil
}
