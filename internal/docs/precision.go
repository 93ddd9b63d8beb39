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
	return string(l.Precision.OrExact()) + ": " + boundClause(l, instances)
}

// boundClause is PrecisionBound without the precision's name.
func boundClause(l enforce.Limit, instances int) string {
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
			return fmt.Sprintf("too small to lease %s, so every request is decided exactly", with)
		}
		over := fmt.Sprintf("at most %d over", b.Over)
		if b.Over == 0 {
			over = "never over"
		}
		return fmt.Sprintf("%s, at most %d under the limit %s %s; leases of up to %d", over, b.Under, per, with, b.Lease)
	case enforce.PrecisionLocal:
		share := l.Limit - b.Under
		if n == 1 {
			return fmt.Sprintf("the one instance enforces %d on its own, no Redis", share)
		}
		s := fmt.Sprintf("each of %d instances enforces %d on its own, no Redis; a caller reaching one instance gets %d", n, share, share)
		if b.Over > 0 {
			s += fmt.Sprintf(", all together at most %d over", b.Over)
		}
		return s
	}
	return "every request decided in Redis"
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

// precisionText is what a leased or local limit means for the developer
// reading the docs, with its bound; "" for an exact limit.
func precisionText(l enforce.Limit, instances int) string {
	n := max(instances, 1)
	switch l.Precision.OrExact() {
	case enforce.PrecisionLeased:
		return fmt.Sprintf("Precision leased: each instance of the API (%d) decides from a slice of this limit's budget leased "+
			"from the shared counters, so X-RateLimit-Remaining is what that instance holds plus what the shared counters "+
			"had left when it last leased, and two responses in a row may not count down by one. In numbers: %s.",
			n, boundClause(l, n))
	case enforce.PrecisionLocal:
		return fmt.Sprintf("Precision local: each instance of the API (%d) enforces its share of this limit on its own, "+
			"so X-RateLimit-Remaining is that instance's share. In numbers: %s.", n, boundClause(l, n))
	}
	return ""
}
