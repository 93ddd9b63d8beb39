package enforce

import "time"

// Quota is the calendar algorithm: a number of cost units per day, month or
// year (Limit.Period), renewing at the subject's billing anchor
// (Request.Anchor) rather than at a window of the clock. Periods are
// computed in UTC; a month anchored on the 31st renews on the last day of
// shorter months, and a year anchored on 29 February on the 28th in other
// years. scripts/decide.lua's period runs the same calendar.
const Quota Algorithm = "quota"

// Period is a quota's renewal period.
type Period string

// The periods of a quota.
const (
	PeriodDay   Period = "day"
	PeriodMonth Period = "month"
	PeriodYear  Period = "year"
)

// Periods lists every period, in the order the UI shows them.
var Periods = []Period{PeriodDay, PeriodMonth, PeriodYear}

// Valid reports whether p is a known period.
func (p Period) Valid() bool { return p == PeriodDay || p == PeriodMonth || p == PeriodYear }

const dayMicros = int64(24 * time.Hour / time.Microsecond)

// quota codes as the Lua script knows them, one per period.
const (
	codeQuotaDay   = "qd"
	codeQuotaMonth = "qm"
	codeQuotaYear  = "qy"
)

// periodCode is p's code in the script, "" for an unknown period.
func periodCode(p Period) string {
	switch p {
	case PeriodDay:
		return codeQuotaDay
	case PeriodMonth:
		return codeQuotaMonth
	case PeriodYear:
		return codeQuotaYear
	}
	return ""
}

// quotaSpan is a period's longest length in µs: the state's lifetime bound
// (and the window that keeps a quota's Redis hash alive).
func quotaSpan(p Period) int64 {
	switch p {
	case PeriodDay:
		return dayMicros
	case PeriodMonth:
		return 31 * dayMicros
	case PeriodYear:
		return 366 * dayMicros
	}
	return 0
}

// periodBounds returns the start and end (µs) of the period of kind period
// ("qd", "qm" or "qy") that holds now, for a subject anchored at anchor.
func periodBounds(period string, now, anchor int64) (start, end int64) {
	if period == codeQuotaDay {
		n := (now - anchor) / dayMicros
		if (now-anchor)%dayMicros < 0 {
			n-- // floor, for a now before the anchor
		}
		start = anchor + n*dayMicros
		return start, start + dayMicros
	}
	a := time.UnixMicro(anchor).UTC()
	t := time.UnixMicro(now).UTC()
	at := func(y int, m time.Month) int64 {
		last := time.Date(y, m+1, 0, 0, 0, 0, 0, time.UTC).Day()
		return time.Date(y, m, min(a.Day(), last), a.Hour(), a.Minute(), a.Second(), a.Nanosecond(), time.UTC).UnixMicro()
	}
	if period == codeQuotaMonth {
		y, m := t.Year(), t.Month()
		c := at(y, m)
		if now >= c {
			ny, nm := y, m+1
			if nm > time.December {
				ny, nm = y+1, time.January
			}
			return c, at(ny, nm)
		}
		py, pm := y, m-1
		if pm < time.January {
			py, pm = y-1, time.December
		}
		return at(py, pm), c
	}
	c := at(t.Year(), a.Month())
	if now >= c {
		return c, at(t.Year()+1, a.Month())
	}
	return at(t.Year()-1, a.Month()), c
}

// anchorMicros is a request's anchor in µs, 0 for the zero Time.
func anchorMicros(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

// evalQuota admits while the period's count plus cost stays within the
// limit; the state is the period's start (idx) and its count.
func evalQuota(s *counterState, p *params, now, anchor int64, commit bool, next *counterState, out *layerOut) {
	start, end := periodBounds(p.period, now, anchor)
	count := int64(0)
	if s.has && s.idx == start {
		count = s.count
	}
	ok := count+p.cost <= p.limit
	if ok && commit {
		count += p.cost
		*next = counterState{idx: start, count: count, has: true}
	}
	*out = layerOut{allowed: ok, remaining: max(0, p.limit-count), reset: end - now, span: end - start}
	if !ok {
		out.retry = end - now
	}
}
