// Package storemetrics holds the Prometheus instruments the stores and the
// middleware share: decision counts by store and result, and the registry
// helpers that let two stores or two middlewares share one registry.
package storemetrics

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics holds the optional Prometheus instruments of a store.
type Metrics struct {
	decisions *decisionStripes
	// latency and batch are set for the Redis store only.
	Latency prometheus.Observer
	Batch   prometheus.Observer
}

// New registers a store's instruments on reg, labelled with the store's
// name; nil when reg is nil.
func New(reg prometheus.Registerer, store string) (*Metrics, error) {
	if reg == nil {
		return nil, nil
	}
	decisions, err := RegisterCollector(reg, &decisionCounts{desc: prometheus.NewDesc("sluice_ratelimit_decisions_total",
		"Rate-limit decisions by store and result (allowed or rejected).", []string{"store", "result"}, nil)})
	if err != nil {
		return nil, err
	}
	m := &Metrics{decisions: decisions.stripes(store)}
	if store != "redis" {
		return m, nil
	}
	Latency, err := RegisterCollector(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "sluice_redis_pipeline_seconds",
		Help:    "Duration of one pipeline of rate-limit script calls to Redis.",
		Buckets: []float64{.0001, .00025, .0005, .001, .002, .005, .01, .025, .05, .1, .25},
	}))
	if err != nil {
		return nil, err
	}
	Batch, err := RegisterCollector(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "sluice_redis_pipeline_decisions",
		Help:    "Decisions sent to Redis in one pipeline.",
		Buckets: prometheus.ExponentialBuckets(1, 2, 9),
	}))
	if err != nil {
		return nil, err
	}
	m.Latency, m.Batch = Latency, Batch
	return m, nil
}

// register registers c, or returns the collector already registered under the
// same description, so a memory and a Redis store can share one registry.
func RegisterCollector[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
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

func (m *Metrics) Count(allowed bool) {
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

// registerOrReuse registers c, or returns the identical collector already
// registered (two middlewares on one registry share their series).
func RegisterOrReuse[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var already prometheus.AlreadyRegisteredError
		if errors.As(err, &already) {
			if existing, ok := already.ExistingCollector.(C); ok {
				return existing
			}
		}
		// A conflicting collector under our name is a wiring bug that must
		// not pass silently.
		panic(err)
	}
	return c
}
