package plans

import (
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/internal/enforce"
)

// MaxCostHeaderLen bounds a tier's cost_header.
const MaxCostHeaderLen = 64

// validateSettle checks a (normalized) tier's count_when and cost_header:
// known values, a header name that is a token, and an algorithm whose
// units can be given back after the response (not a sliding log, whose
// entries are requests in time; not a concurrency limit, which counts
// requests in flight).
func validateSettle(prefix string, l LimitInput, algo enforce.Algorithm) []FieldError {
	var errs []FieldError
	add := func(field, format string, args ...any) {
		errs = append(errs, FieldError{Field: prefix + field, Message: fmt.Sprintf(format, args...)})
	}
	when := enforce.CountWhen(l.CountWhen)
	switch {
	case !when.Valid():
		add("count_when", "unknown value %q: must be always, success or error", l.CountWhen)
	case when != enforce.CountAlways && algo == enforce.Concurrency:
		add("count_when", "must be always: a concurrency limit counts requests in flight, whatever they answer")
	case when != enforce.CountAlways && algo == enforce.SlidingWindowLog:
		add("count_when", "must be always for sliding_window_log: its entries cannot be given back after the response; use sliding_window_counter")
	case when != enforce.CountAlways && !settledExactly(l):
		add("count_when", "must be always unless the precision is exact: a leased or local tier decides in an instance's memory, where a response's settlement does not reach")
	}
	switch h := l.CostHeader; {
	case h == "":
	case len(h) > MaxCostHeaderLen || !validHeaderName(h):
		add("cost_header", "must be a header name of at most %d letters, digits and !#$%%&'*+-.^_`|~ (e.g. X-Tokens-Used)", MaxCostHeaderLen)
	case algo == enforce.Concurrency:
		add("cost_header", "must be empty: a request in flight holds one slot of a concurrency limit")
	case algo == enforce.SlidingWindowLog:
		add("cost_header", "must be empty for sliding_window_log: its entries cannot be settled after the response; use sliding_window_counter")
	case !settledExactly(l):
		add("cost_header", "must be empty unless the precision is exact: a leased or local tier decides in an instance's memory, where a response's settlement does not reach")
	}
	return errs
}

// settledExactly reports whether a tier's settlements reach the state it
// is decided on: an exact tier's, in the shared store.
func settledExactly(l LimitInput) bool {
	return enforce.Precision(l.Precision).OrExact() == enforce.PrecisionExact
}

// validHeaderName reports whether h is an HTTP field name (RFC 9110 token).
func validHeaderName(h string) bool {
	if h == "" {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c < 0x80 && c > ' ' && strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}
