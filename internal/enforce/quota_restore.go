package enforce

import "time"

// QuotaPeriod returns the start and end of the period of quota l that
// holds at, for a subject anchored at anchor (Request.Anchor): the
// calendar both stores decide on.
func QuotaPeriod(l Limit, anchor, at time.Time) (start, end time.Time) {
	code := PeriodCode(l.Period)
	if code == "" {
		code = CodeQuotaMonth
	}
	s, e := PeriodBounds(code, at.UnixMicro(), AnchorMicros(anchor))
	return time.UnixMicro(s), time.UnixMicro(e)
}
