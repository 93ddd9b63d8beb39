package gateway

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sluicehq/sluice/internal/enforce/storemetrics"
)

// unknownLogEvery is how often, at most, each kind of unknown input is
// logged: an Envoy misconfigured for one route sends one on every request,
// and a line per request would flood the log for as long as it lasts.
const unknownLogEvery = time.Minute

// unknownCounts counts and logs what the rate-limit service was sent and
// does not know: a domain naming no service, a descriptor with none of
// Sluice's entries.
type unknownCounts struct {
	domains, descriptors prometheus.Counter
	domainLog, descLog   sparseLog
}

func newUnknownCounts(reg prometheus.Registerer) *unknownCounts {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_envoy_unknown_total",
		Help: "Envoy rate-limit requests whose domain names no service (what=domain, refused with NotFound), " +
			"and descriptors with none of Sluice's entries (what=descriptor, answered OK and unlimited).",
	}, []string{"what"})
	if reg != nil {
		vec = storemetrics.RegisterOrReuse(reg, vec)
	}
	return &unknownCounts{domains: vec.WithLabelValues("domain"), descriptors: vec.WithLabelValues("descriptor")}
}

func (u *unknownCounts) domainSeen(ctx context.Context, log *slog.Logger, domain string) {
	u.domains.Inc()
	if n, ok := u.domainLog.due(time.Now()); ok {
		log.WarnContext(ctx, "envoy rate-limit request for an unknown domain: set the rate-limit filter's domain to a service's slug",
			"domain", clip(domain), "similar_since_last_line", n)
	}
}

func (u *unknownCounts) descriptorSeen(ctx context.Context, log *slog.Logger, service string, d *rlv3.RateLimitDescriptor) {
	u.descriptors.Inc()
	if n, ok := u.descLog.due(time.Now()); ok {
		// The keys say which action built it; the values may hold a key
		// or an address, so they are never logged.
		keys := make([]string, 0, len(d.GetEntries()))
		for _, e := range d.GetEntries() {
			keys = append(keys, clip(e.GetKey()))
		}
		log.WarnContext(ctx, "envoy descriptor with none of Sluice's entries, answered OK without a limit",
			"service", service, "entry_keys", strings.Join(keys, ","), "similar_since_last_line", n)
	}
}

// sparseLog lets a line through at most once per unknownLogEvery and
// counts the ones held back meanwhile.
type sparseLog struct {
	next atomic.Int64 // unix nanoseconds before which no line is due
	held atomic.Int64
}

// due reports whether a line is due at now, and how many were held back
// since the last one.
func (l *sparseLog) due(now time.Time) (held int64, ok bool) {
	next := l.next.Load()
	if now.UnixNano() < next || !l.next.CompareAndSwap(next, now.Add(unknownLogEvery).UnixNano()) {
		l.held.Add(1)
		return 0, false
	}
	return l.held.Swap(0), true
}

// clip bounds a value from a request before it is logged or echoed.
func clip(s string) string {
	const limit = 64
	if len(s) <= limit {
		return s
	}
	return s[:limit] + "..."
}
