package enforce

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Usage statistics: both stores count admitted and rejected requests per
// subject and route in 10-second buckets, kept for 65 minutes, so the
// dashboards can draw the last hour. Redis counts them in the same script call
// as the decision; Peek counts nothing.
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

// usageBucket is one bucket of a memory-store series.
type usageBucket struct {
	start    int64 // Unix seconds
	admitted int64
	rejected int64
}

// routeSeries is the memory store's usage of one subject on one route: the
// buckets that saw traffic, oldest first, none older than UsageRetention.
type routeSeries struct {
	route   string
	buckets []usageBucket
}

func (s *routeSeries) record(unixSeconds int64, allowed bool) {
	start := usageBucketStart(unixSeconds)
	n := len(s.buckets)
	if n == 0 || s.buckets[n-1].start != start {
		// Trim what fell out of retention before growing, so the slice
		// stays bounded by the number of buckets in UsageRetention.
		oldest := start - int64(UsageRetention/time.Second)
		drop := 0
		for drop < n && s.buckets[drop].start < oldest {
			drop++
		}
		if drop > 0 {
			n = copy(s.buckets, s.buckets[drop:])
			s.buckets = s.buckets[:n]
		}
		s.buckets = append(s.buckets, usageBucket{start: start})
		n++
	}
	if allowed {
		s.buckets[n-1].admitted++
	} else {
		s.buckets[n-1].rejected++
	}
}

// storeMetrics holds the optional Prometheus instruments of a store.
type storeMetrics struct {
	allowed  prometheus.Counter
	rejected prometheus.Counter
	// latency and batch are set for the Redis store only.
	latency prometheus.Observer
	batch   prometheus.Observer
}

func newStoreMetrics(reg prometheus.Registerer, store string) (*storeMetrics, error) {
	if reg == nil {
		return nil, nil
	}
	decisions, err := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_ratelimit_decisions_total",
		Help: "Rate-limit decisions by store and result (allowed or rejected).",
	}, []string{"store", "result"}))
	if err != nil {
		return nil, err
	}
	m := &storeMetrics{
		allowed:  decisions.WithLabelValues(store, "allowed"),
		rejected: decisions.WithLabelValues(store, "rejected"),
	}
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
	if allowed {
		m.allowed.Inc()
	} else {
		m.rejected.Inc()
	}
}
