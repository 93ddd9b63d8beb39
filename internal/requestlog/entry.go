// Package requestlog keeps the request log: one row per logged decision of
// the engine (every rejection, a sample of admissions), with who asked,
// which route, what the client got, the layer that fired and its
// Retry-After, whether the store was degraded, the way in, and the
// upstream's status and latency when Sluice saw the response.
//
// The decision path calls Writer.Log, which copies the entry into a bounded
// in-memory buffer under a mutex and returns: no I/O, no allocation, and
// when the buffer is full the entry is dropped and counted
// (sluice_request_log_dropped_total{reason="queue_full"}), never waited
// for. Writer.Run drains the buffer off the request path: it hands every
// entry to an Observer (the analytics rollups), keeps the sample, and
// writes it with COPY into a table partitioned by UTC day. Partitions past
// the retention are dropped whole, and a row and a size cap drop the oldest
// days first (see partitions.go).
package requestlog

import (
	"errors"
	"net/netip"
	"time"
)

// Outcome is what the engine decided for one request, as the log names it.
type Outcome uint8

// The outcomes. Admitted, Queued, Degraded and FailedOpen reached the
// protected API; the others were answered by Sluice.
const (
	Admitted Outcome = iota + 1
	// Queued was admitted after waiting its turn (a leaky bucket in queue
	// mode).
	Queued
	// Degraded went over a degrade-mode tier: the API served a reduced answer.
	Degraded
	// FailedOpen was admitted without a decision: the store was unreachable
	// and the failure mode is open.
	FailedOpen
	// Rejected was answered 429.
	Rejected
	// Unavailable was answered 503: the store was unreachable and the
	// failure mode closed.
	Unavailable
	// Unauthorized presented an unusable key and was answered 401.
	Unauthorized
)

var outcomeNames = [...]string{
	Admitted: "admitted", Queued: "queued", Degraded: "degraded", FailedOpen: "failed_open",
	Rejected: "rejected", Unavailable: "unavailable", Unauthorized: "unauthorized",
}

// Outcomes lists every outcome, in the order the pages offer them.
var Outcomes = []Outcome{Admitted, Queued, Degraded, FailedOpen, Rejected, Unavailable, Unauthorized}

// String is the outcome's name as stored and shown ("rejected").
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) && o > 0 {
		return outcomeNames[o]
	}
	return "unknown"
}

// Reached reports whether a request of this outcome reached the protected
// API (and so may have an upstream status and latency).
func (o Outcome) Reached() bool { return o >= Admitted && o <= FailedOpen }

// ErrOutcome is returned by ParseOutcome for a name it does not know.
var ErrOutcome = errors.New("outcome must be one of admitted, queued, degraded, failed_open, rejected, unavailable, unauthorized")

// ParseOutcome reads an outcome's name.
func ParseOutcome(s string) (Outcome, error) {
	for _, o := range Outcomes {
		if o.String() == s {
			return o, nil
		}
	}
	return 0, ErrOutcome
}

// The ways in, as Entry.WayIn names them.
const (
	WayMiddleware = "middleware"
	WayCheck      = "check"
	WayProxy      = "proxy"
	WayGuard      = "guard"
	WayEnvoy      = "envoy"
)

// Entry is one decision to log. Every field is a value the decision path
// already holds (the snapshot's plan slug, the mux's route pattern, the
// policy name of the binding layer): Log copies the entry and never the
// bytes of its strings.
type Entry struct {
	// At is when the decision was made.
	At time.Time
	// WayIn is how the request arrived: WayMiddleware, WayCheck, WayProxy,
	// WayGuard, WayEnvoy.
	WayIn   string
	Outcome Outcome
	// Plan is the caller's plan slug, Route the matched ServeMux pattern
	// ("" for none).
	Plan, Route string
	// KeyID and UserID are the caller's key and developer; both 0 for an
	// anonymous caller, who is logged by the block of Addr (an IPv4 /24,
	// an IPv6 /48). Addr is ignored for keyed callers.
	KeyID, UserID int64
	Addr          netip.Addr
	// Layer is the policy name of the layer that fired ("pro-search"): the
	// rejecting layer the client waits for, or the degrade-mode layer
	// exceeded; "" for admissions.
	Layer string
	// RetryAfter is the Retry-After the client was told, 0 for none.
	RetryAfter time.Duration
	// StoreDegraded says the decision was made without the shared store:
	// "local", "region-share" or "store-unavailable" (the engine's
	// HeaderStoreDegraded values); "" when it was not.
	StoreDegraded string
	// Status is the HTTP status the client got (the upstream's when Sluice
	// saw the response, its own 429/503/401 otherwise); 0 when Sluice did
	// not see the answer (forward auth, Envoy).
	Status int
	// UpstreamStatus and Latency are the protected API's status and how
	// long it took to answer, when Sluice saw the response (middleware,
	// proxy, guard); 0 when unknown.
	UpstreamStatus int
	Latency        time.Duration
}

// Block is the address block an anonymous caller is logged under: an IPv4
// address's /24, an IPv6 address's /48; "" for an invalid address.
func Block(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	a = a.Unmap()
	bits := 24
	if a.Is6() {
		bits = 48
	}
	p, err := a.Prefix(bits)
	if err != nil {
		return ""
	}
	return p.String()
}

// StatusClass is the class of an HTTP status, 1 to 5 ("2xx" is 2); 0 when
// the status is unknown.
func StatusClass(status int) int {
	if status < 100 || status > 599 {
		return 0
	}
	return status / 100
}
