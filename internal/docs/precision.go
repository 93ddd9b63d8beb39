package docs

import (
	"fmt"

	"github.com/sluicehq/sluice/internal/enforce"
)

// PrecisionBound states a limit's precision and its worst case against an
// exact limit with instances sharing it (enforce.LeaseBounds), in one line
// for a person: "leased: at most 40 over, 40 under the limit per window with
// 2 instances; leases of up to 20". The tier form shows it to the operator
// and the generated docs to developers, so both read the same figures.
func PrecisionBound(l enforce.Limit, instances int) string {
	n := max(instances, 1)
	with := "with 1 instance"
	if n > 1 {
		with = fmt.Sprintf("with %d instances", n)
	}
	per := "per window"
	if l.Algorithm == enforce.Quota {
		per = "per period"
	}
	b := enforce.LeaseBounds(l, n)
	switch l.Precision.OrExact() {
	case enforce.PrecisionLeased:
		if b.Over == 0 && b.Under == 0 {
			return fmt.Sprintf("leased: too small to lease %s, so every request is decided exactly", with)
		}
		over := fmt.Sprintf("at most %d over", b.Over)
		if b.Over == 0 {
			over = "never over"
		}
		return fmt.Sprintf("leased: %s, at most %d under the limit %s %s; leases of up to %d", over, b.Under, per, with, b.Lease)
	case enforce.PrecisionLocal:
		share := l.Limit - b.Under
		if n == 1 {
			return fmt.Sprintf("local: the one instance enforces %d on its own, no Redis", share)
		}
		s := fmt.Sprintf("local: each of %d instances enforces %d on its own, no Redis; a caller reaching one instance gets %d", n, share, share)
		if b.Over > 0 {
			s += fmt.Sprintf(", all together at most %d over", b.Over)
		}
		return s
	}
	return "exact: every request decided in Redis"
}

// PrecisionMeaning is what a precision means, in a few words, for a
// choice among them.
func PrecisionMeaning(p enforce.Precision) string {
	switch p.OrExact() {
	case enforce.PrecisionLeased:
		return "leased: each instance decides from a lease of the budget, within a stated bound"
	case enforce.PrecisionLocal:
		return "local: each instance enforces its share on its own, no Redis"
	}
	return "exact (default): every request decided in Redis"
}
