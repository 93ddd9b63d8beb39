package web

import (
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/views"
)

// gaugeOf turns a layer of a Peek into what a person reads. Remaining is
// not "limit minus used" for the buckets: an idle token bucket holds its
// burst (not its limit per window), and an idle leaky bucket admits its
// queue depth plus the request being served, so subtracting from the limit
// showed an unused key as nearly spent.
func gaugeOf(l enforce.LayerResult) views.Gauge {
	left := max(l.Remaining, 0)
	switch l.Limit.Algorithm {
	case enforce.TokenBucket:
		burst := l.Limit.Burst
		if burst == 0 {
			burst = l.Limit.Limit
		}
		return views.Gauge{Kind: views.GaugeTokens, Of: burst, Left: min(left, burst)}
	case enforce.Concurrency:
		return views.Gauge{Kind: views.GaugeSlots, Of: l.Limit.Limit, Left: min(left, l.Limit.Limit)}
	case enforce.LeakyBucket:
		places := l.Limit.Burst + 1
		return views.Gauge{Kind: views.GaugeQueue, Of: places, Left: min(left, places)}
	default:
		return views.Gauge{Kind: views.GaugeWindow, Of: l.Limit.Limit, Left: min(left, l.Limit.Limit)}
	}
}
