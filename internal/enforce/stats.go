package enforce

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
)

// Usage statistics: both stores count admitted and rejected requests per
// subject and route in 10-second buckets, kept for 65 minutes, so the
// dashboards can draw the last hour. The Redis store tallies them in memory
// and adds them to Redis once per RedisOptions.UsageFlush (default a second),
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

// usageBucketStart is the start of the bucket holding t, in Unix seconds.
func usageBucketStart(unixSeconds int64) int64 {
	width := int64(UsageBucket / time.Second)
	return unixSeconds - unixSeconds%width
}

// storeMetrics holds the optional Prometheus instruments of a store.
type storeMetrics struct {
	decisions *decisionStripes
	// latency and batch are set for the Redis store only.
	latency prometheus.Observer
	batch   prometheus.Observer
}

func newStoreMetrics(reg prometheus.Registerer, store string) (*storeMetrics, error) {
	if reg == nil {
		return nil, nil
	}
	decisions, err := register(reg, &decisionCounts{desc: prometheus.NewDesc("sluice_ratelimit_decisions_total",
		"Rate-limit decisions by store and result (allowed or rejected).", []string{"store", "result"}, nil)})
	if err != nil {
		return nil, err
	}
	m := &storeMetrics{decisions: decisions.stripes(store)}
	if store != "redis" {
		return m, nil
	}
	latency, err := register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "sluice_redis_pipeline_seconds",
		Help:    "Duration of one pipeline of rate-limit script calls to Redis.",
		Buckets: []float64{.0001, .00025, .0005, .001, .002, .005, .01, .025, .05, .1, .25},
	}))
	if err != nil {
		return nil, err
	}
	batch, err := register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "sluice_redis_pipeline_decisions",
		Help:    "Decisions sent to Redis in one pipeline.",
		Buckets: prometheus.ExponentialBuckets(1, 2, 9),
	}))
	if err != nil {
		return nil, err
	}
	m.latency, m.batch = latency, batch
	return m, nil
}

// register registers c, or returns the collector already registered under the
// same description, so a memory and a Redis store can share one registry.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		var zero C
		return zero, fmt.Errorf("register rate-limit metrics: %w", err)
	}
	return c, nil
}

func (m *storeMetrics) count(allowed bool) {
	if m == nil {
		return
	}
	st := &m.decisions[stripe()]
	if allowed {
		st.allowed.Add(1)
	} else {
		st.rejected.Add(1)
	}
}

// decisionCounts is sluice_ratelimit_decisions_total. Each store's counts
// are striped over cache lines by goroutine and summed when scraped: with
// one counter per result, as a CounterVec keeps it, every decision on
// every core wrote the same cache line, the one line that decisions over
// many subjects on several cores otherwise share (see
// BenchmarkMemoryInterleavedParallel). Stores registered with one registry
// share it, as they would a CounterVec.
type decisionCounts struct {
	desc   *prometheus.Desc
	mu     sync.Mutex
	stores map[string]*decisionStripes
}

const (
	decisionStripeBits  = 6
	decisionStripeCount = 1 << decisionStripeBits
)

type decisionStripes [decisionStripeCount]struct {
	allowed, rejected atomic.Uint64
	_                 [48]byte // a cache line each
}

// stripes returns the counters of store, made on first use.
func (c *decisionCounts) stripes(store string) *decisionStripes {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stores == nil {
		c.stores = make(map[string]*decisionStripes)
	}
	if c.stores[store] == nil {
		c.stores[store] = new(decisionStripes)
	}
	return c.stores[store]
}

// Describe implements prometheus.Collector.
func (c *decisionCounts) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *decisionCounts) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for store, stripes := range c.stores {
		var allowed, rejected uint64
		for i := range stripes {
			allowed += stripes[i].allowed.Load()
			rejected += stripes[i].rejected.Load()
		}
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(allowed), store, "allowed")
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(rejected), store, "rejected")
	}
}

// stripe picks the calling goroutine's decision counters from the address
// of its stack (goroutine stacks are at least 8 KiB apart), so that
// goroutines running at once on different cores seldom write one cache
// line, and a goroutine keeps writing the line its core already holds.
func stripe() int {
	var marker byte
	return int(uint64(uintptr(unsafe.Pointer(&marker))>>13) * 0x9E3779B97F4A7C15 >> (64 - decisionStripeBits))
}

// usageTally is the Redis store's usage counting: decisions are counted in
// memory and added to the Redis usage hashes by one pipeline per flush
// interval, instead of by a HINCRBY inside every decision script, which cost
// Redis about as much as the decision's own state write. A hot subject then
// costs Redis one HINCRBY per second per route, not one per request.
type usageTally struct {
	mu      sync.Mutex
	pending map[usageTallyKey]usageCounts
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

// maxPendingUsage bounds the counts kept while Redis cannot take them; past
// it, a failed flush's counts are dropped rather than memory grown.
const maxPendingUsage = 100_000

func (u *usageTally) add(subject, route string, bucket int64, allowed, keyed bool) {
	k := usageTallyKey{subject, route, bucket}
	u.mu.Lock()
	if u.pending == nil {
		u.pending = make(map[usageTallyKey]usageCounts)
	}
	c := u.pending[k]
	c.keyed = c.keyed || keyed
	if allowed {
		c.admitted++
	} else {
		c.rejected++
	}
	u.pending[k] = c
	u.mu.Unlock()
}

// take returns the pending counts and starts afresh.
func (u *usageTally) take() map[usageTallyKey]usageCounts {
	u.mu.Lock()
	defer u.mu.Unlock()
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
// of the callers without a key beyond RedisOptions.UsageTopSubjects in a
// bucket: one row per route.
const UsageOthers = "(others)"

// DefaultUsageTopSubjects is RedisOptions.UsageTopSubjects's default.
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
		if b < now-int64(UsageRetention/time.Second) {
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
