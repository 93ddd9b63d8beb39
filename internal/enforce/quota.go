package enforce

import (
	"fmt"
	"time"
)

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
	CodeQuotaDay   = "qd"
	CodeQuotaMonth = "qm"
	CodeQuotaYear  = "qy"
)

// periodCode is p's code in the script, "" for an unknown period.
func PeriodCode(p Period) string {
	switch p {
	case PeriodDay:
		return CodeQuotaDay
	case PeriodMonth:
		return CodeQuotaMonth
	case PeriodYear:
		return CodeQuotaYear
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
func PeriodBounds(period string, now, anchor int64) (start, end int64) {
	if period == CodeQuotaDay {
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
	if period == CodeQuotaMonth {
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
func AnchorMicros(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

// evalQuota admits while the period's count plus cost stays within the
// limit; the state is the period's start (idx) and its count.
func EvalQuota(s *CounterState, p *Params, now, anchor int64, commit bool, next *CounterState, out *LayerOut) {
	start, end := PeriodBounds(p.Period, now, anchor)
	count := int64(0)
	if s.Has && s.Idx == start {
		count = s.Count
	}
	ok := count+p.Cost <= p.Limit
	if ok && commit {
		count += p.Cost
		*next = CounterState{Idx: start, Count: count, Has: true}
	}
	*out = LayerOut{Allowed: ok, Remaining: max(0, p.Limit-count), Reset: end - now, Span: end - start}
	if !ok {
		out.Retry = end - now
	}
}

// quotaOf checks that req names one quota and returns its params and the
// instant (µs) of now in the subject's period.
func QuotaOf(req Request) (Params, error) {
	if err := ValidateRequest(req); err != nil {
		return Params{}, err
	}
	if len(req.Limits) != 1 || req.Limits[0].Algorithm != Quota {
		return Params{}, fmt.Errorf("%w: adjusting a quota needs exactly one quota limit", ErrInvalidRequest)
	}
	return ParamsOf(&req.Limits[0])
}
