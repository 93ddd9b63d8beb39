package views

// GaugeKind says what a limit's figures count, which depends on its
// algorithm: a window counts requests made, a token bucket tokens left, a
// leaky bucket free places in its queue, a concurrency limit requests in
// flight.
type GaugeKind string

// The kinds of gauge.
const (
	GaugeWindow GaugeKind = "window"
	GaugeTokens GaugeKind = "tokens"
	GaugeQueue  GaugeKind = "queue"
	GaugeSlots  GaugeKind = "slots"
)

// Gauge is how full one limit is now, in its algorithm's own terms.
type Gauge struct {
	Kind GaugeKind
	// Of is the most there can be: the limit of a window, the burst of a
	// token bucket, the places of a leaky bucket's queue, the slots of a
	// concurrency limit.
	Of int64
	// Left is what is still available of Of: requests the window still
	// admits, tokens in the bucket, free places in the queue, free slots.
	Left int64
}

// Taken is what is in use of Of: requests in the window, tokens spent,
// places queued, requests in flight.
func (g Gauge) Taken() int64 { return max(g.Of-g.Left, 0) }

// Percent is how much of Of is taken, 0 to 100.
func (g Gauge) Percent() int64 {
	if g.Of <= 0 {
		return 0
	}
	return min(g.Taken()*100/g.Of, 100)
}

// Resets reports whether the limit frees up at a time the page can show: a
// concurrency limit's slots free when requests end, not at a reset.
func (g Gauge) Resets() bool { return g.Kind != GaugeSlots }
