package httplimit

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sluicehq/sluice/internal/enforce/storemetrics"
)

// The ways a request comes in, the values of the decision metrics' way_in
// label: a fixed set, so the label stays bounded.
const (
	WayInMiddleware = "middleware" // the embedded middleware (Wrap, Enforce)
	WayInCheck      = "check"      // forward auth, /v1/check
	WayInProxy      = "proxy"      // the reverse proxy
	WayInGuard      = "guard"      // package guard, in another process
	WayInEnvoy      = "envoy"      // Envoy's rate-limit service
)

// wayInName bounds a way_in label to the known ways in.
func wayInName(name string) string {
	switch name {
	case "":
		return WayInMiddleware
	case WayInMiddleware, WayInCheck, WayInProxy, WayInGuard, WayInEnvoy:
		return name
	}
	return "other"
}

// middlewareMetrics counts what the middleware did with each request. Labels
// are bounded: routes are registered ServeMux patterns, plans are the
// control plane's slugs, never subjects or keys, and way_in one of the
// WayIn constants.
type middlewareMetrics struct {
	// requestsAll and latencyAll are the registered vectors; requests and
	// latency the same with way_in fixed to this middleware's way in.
	requestsAll *prometheus.CounterVec
	latencyAll  *prometheus.HistogramVec
	requests    *prometheus.CounterVec
	latency     prometheus.ObserverVec
	shadow      *prometheus.CounterVec
	// counters (counterKey -> prometheus.Counter) and observers (route ->
	// prometheus.Observer) remember the series already looked up:
	// WithLabelValues hashes and checks every label on every call, which
	// costs a request more than its decision on the memory store.
	counters  sync.Map
	observers sync.Map
}

type counterKey struct{ route, plan, outcome string }

func newMiddlewareMetrics(reg prometheus.Registerer, wayIn string) *middlewareMetrics {
	m := &middlewareMetrics{
		requestsAll: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_enforce_requests_total",
			Help: "Requests seen by the rate-limit middleware, by route pattern, plan, outcome " +
				"(admitted, queued, degraded, rejected, cancelled, unauthorized, forbidden, failed_open, unavailable) " +
				"and way in (middleware, check, proxy, guard, envoy).",
		}, []string{"route", "plan", "outcome", "way_in"}),
		latencyAll: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sluice_enforce_decision_seconds",
			Help: "Time taken by one rate-limit decision (Store.Allow), by route pattern and way in.",
			// Decisions take microseconds in memory and a Redis round trip
			// (sub-millisecond) otherwise; the top buckets catch timeouts.
			Buckets: []float64{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1},
		}, []string{"route", "way_in"}),
		shadow: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_shadow_rejections_total",
			Help: "Requests a shadow tier (mode shadow, never enforced) would have rejected, by plan and tier.",
		}, []string{"plan", "tier"}),
	}
	if reg != nil {
		m.requestsAll = storemetrics.RegisterOrReuse(reg, m.requestsAll)
		m.latencyAll = storemetrics.RegisterOrReuse(reg, m.latencyAll)
		m.shadow = storemetrics.RegisterOrReuse(reg, m.shadow)
	}
	return m.forWayIn(wayIn)
}

// forWayIn returns metrics on the same vectors whose series carry way_in
// wayIn, with series caches of their own.
func (m *middlewareMetrics) forWayIn(wayIn string) *middlewareMetrics {
	label := prometheus.Labels{"way_in": wayInName(wayIn)}
	return &middlewareMetrics{
		requestsAll: m.requestsAll,
		latencyAll:  m.latencyAll,
		requests:    m.requestsAll.MustCurryWith(label),
		latency:     m.latencyAll.MustCurryWith(label),
		shadow:      m.shadow,
	}
}

func (m *middlewareMetrics) count(route, plan, outcome string) {
	key := counterKey{route, plan, outcome}
	if c, ok := m.counters.Load(key); ok {
		c.(prometheus.Counter).Inc()
		return
	}
	c := m.requests.WithLabelValues(route, plan, outcome)
	m.counters.Store(key, c)
	c.Inc()
}

// countShadow counts a would-be rejection; rare enough (shadow tiers only)
// to look the series up each time.
func (m *middlewareMetrics) countShadow(plan, tier string) {
	m.shadow.WithLabelValues(plan, tier).Inc()
}

// planSeries are the series of one route and plan that nearly every
// request updates, looked up once for the middleware's route cache: two
// sync.Map lookups hashing up to three labels cost about a tenth of a
// microsecond per request, which the portal's memory store decision takes
// in all.
type planSeries struct {
	plan               string
	admitted, rejected prometheus.Counter
	latency            prometheus.Observer
}

func (m *middlewareMetrics) series(route, plan string) *planSeries {
	return &planSeries{
		plan:     plan,
		admitted: m.requests.WithLabelValues(route, plan, "admitted"),
		rejected: m.requests.WithLabelValues(route, plan, "rejected"),
		latency:  m.latency.WithLabelValues(route),
	}
}

// countIn counts a request of route and plan in s, when s has its outcome's
// series, else as count does.
func (m *middlewareMetrics) countIn(s *planSeries, route, plan, outcome string) {
	switch {
	case s != nil && outcome == "admitted":
		s.admitted.Inc()
	case s != nil && outcome == "rejected":
		s.rejected.Inc()
	default:
		m.count(route, plan, outcome)
	}
}

// observeIn is observe through s, when set.
func (m *middlewareMetrics) observeIn(s *planSeries, route string, d time.Duration) {
	if s != nil {
		s.latency.Observe(d.Seconds())
		return
	}
	m.observe(route, d)
}

func (m *middlewareMetrics) observe(route string, d time.Duration) {
	if o, ok := m.observers.Load(route); ok {
		o.(prometheus.Observer).Observe(d.Seconds())
		return
	}
	o := m.latency.WithLabelValues(route)
	m.observers.Store(route, o)
	o.Observe(d.Seconds())
}
