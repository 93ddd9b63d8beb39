package redisstore

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
)

// usageTally is the Redis store's usage counting: decisions are counted in
// memory and added to the Redis usage hashes by one pipeline per flush
// interval, instead of by a HINCRBY inside every decision script, which cost
// Redis about as much as the decision's own state write. A hot subject then
// costs Redis one HINCRBY per second per route, not one per request.
type usageTally struct {
	mu      sync.Mutex
	pending map[usageTallyKey]usageCounts
	// last and lastN are the latest decision's key and its counts so far,
	// not yet in pending: a busy subject's decisions come in runs, and a run
	// costs one comparison per decision instead of hashing its key into the
	// map (the lease store's decisions are all counted here).
	last  usageTallyKey
	lastN usageCounts
}

type usageTallyKey struct {
	subject, route string
	bucket         int64 // Unix seconds, a multiple of UsageBucket
}

type usageCounts struct {
	admitted, rejected int64
	// keyed is true when the subject's requests carry a Request.Key: a
	// developer's, whose series is never folded into UsageOthers.
	keyed bool
}

func (c *usageCounts) empty() bool { return c.admitted == 0 && c.rejected == 0 }

// maxPendingUsage bounds the counts kept while Redis cannot take them; past
// it, a failed flush's counts are dropped rather than memory grown.
const maxPendingUsage = 100_000

func (u *usageTally) add(subject, route string, bucket int64, allowed, keyed bool) {
	u.mu.Lock()
	if u.lastN.empty() || u.last.bucket != bucket || u.last.subject != subject || u.last.route != route {
		u.settle()
		u.last = usageTallyKey{subject, route, bucket}
	}
	c := &u.lastN
	c.keyed = c.keyed || keyed
	if allowed {
		c.admitted++
	} else {
		c.rejected++
	}
	u.mu.Unlock()
}

// settle moves the latest run's counts into pending; u.mu is held.
func (u *usageTally) settle() {
	if u.lastN.empty() {
		return
	}
	if u.pending == nil {
		u.pending = make(map[usageTallyKey]usageCounts)
	}
	c := u.pending[u.last]
	c.admitted += u.lastN.admitted
	c.rejected += u.lastN.rejected
	c.keyed = c.keyed || u.lastN.keyed
	u.pending[u.last] = c
	u.last, u.lastN = usageTallyKey{}, usageCounts{}
}

// take returns the pending counts and starts afresh.
func (u *usageTally) take() map[usageTallyKey]usageCounts {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.settle()
	p := u.pending
	u.pending = nil
	return p
}

// restore puts back counts a flush could not write, while there is room.
func (u *usageTally) restore(counts map[usageTallyKey]usageCounts) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.pending == nil {
		u.pending = make(map[usageTallyKey]usageCounts, len(counts))
	}
	for k, c := range counts {
		if len(u.pending) >= maxPendingUsage {
			return
		}
		p := u.pending[k]
		p.admitted += c.admitted
		p.rejected += c.rejected
		p.keyed = p.keyed || c.keyed
		u.pending[k] = p
	}
}

// UsageOthers is the subject under which the Redis store adds up the usage
// of the callers without a key beyond Options.UsageTopSubjects in a
// bucket: one row per route.
const UsageOthers = "(others)"

// DefaultUsageTopSubjects is Options.UsageTopSubjects's default.
const DefaultUsageTopSubjects = 100

// foldOthers bounds the series one flush writes: in each bucket, the
// unkeyed subjects beyond the top that already have a series (written) or
// fit under top, biggest first, have their counts moved to UsageOthers.
// It returns written updated with the subjects given a series, dropping
// buckets out of retention.
func foldOthers(counts map[usageTallyKey]usageCounts, written map[int64]map[string]struct{}, top int, now int64) map[int64]map[string]struct{} {
	if written == nil {
		written = make(map[int64]map[string]struct{})
	}
	for b := range written {
		if b < now-int64(enforce.UsageRetention/time.Second) {
			delete(written, b)
		}
	}
	// The unkeyed subjects new to their bucket, with their flush totals.
	type newcomer struct {
		subject string
		total   int64
	}
	fresh := map[int64]map[string]int64{}
	for k, c := range counts {
		if c.keyed || k.subject == UsageOthers {
			continue
		}
		if _, ok := written[k.bucket][k.subject]; ok {
			continue
		}
		m := fresh[k.bucket]
		if m == nil {
			m = map[string]int64{}
			fresh[k.bucket] = m
		}
		m[k.subject] += c.admitted + c.rejected
	}
	for bucket, subjects := range fresh {
		seen := written[bucket]
		if seen == nil {
			seen = map[string]struct{}{}
			written[bucket] = seen
		}
		room := top - len(seen)
		if room >= len(subjects) {
			for subject := range subjects {
				seen[subject] = struct{}{}
			}
			continue
		}
		list := make([]newcomer, 0, len(subjects))
		for subject, total := range subjects {
			list = append(list, newcomer{subject, total})
		}
		slices.SortFunc(list, func(a, b newcomer) int {
			return cmp.Or(cmp.Compare(b.total, a.total), strings.Compare(a.subject, b.subject))
		})
		folded := map[string]bool{}
		for i, n := range list {
			if i < room {
				seen[n.subject] = struct{}{}
			} else {
				folded[n.subject] = true
			}
		}
		for k, c := range counts {
			if k.bucket != bucket || !folded[k.subject] {
				continue
			}
			delete(counts, k)
			o := usageTallyKey{subject: UsageOthers, route: k.route, bucket: bucket}
			oc := counts[o]
			oc.admitted += c.admitted
			oc.rejected += c.rejected
			counts[o] = oc
		}
	}
	return written
}
