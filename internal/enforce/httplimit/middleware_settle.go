package httplimit

import (
	"context"
	"net/http"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/internal/enforce"
)

// HeaderCount is set on the responses of a route whose tiers are settled
// after the response, saying how each such tier counts the request, e.g.
//
//	Sluice-Count: "pro-llm";when=success, "pro-tokens";cost-header="x-tokens-used"
//
// when=success: only a 1xx-3xx response counts (a 4xx/5xx gives the cost
// back); when=error: only a 4xx/5xx counts; cost-header: the header's
// whole-number value is the cost. The rate-limit fields of the same
// response are figured before the response, at the tier's cost.
const HeaderCount = "Sluice-Count"

// SettleRecorder is told of what each settlement after a response changed
// on each limit (by its Name): units charged, or given back (negative),
// once the store has carried it out. Metering adds it to what the
// admitted requests cost. Shadow limits are left out.
type SettleRecorder interface {
	RecordSettled(caller enforce.Caller, limit string, units int64)
}

// countText is HeaderCount's value for limits: those that settle.
func countText(limits []enforce.Limit) string {
	var b strings.Builder
	for i := range limits {
		l := &limits[i]
		when := l.CountWhen != "" && l.CountWhen != enforce.CountAlways
		if !when && l.CostHeader == "" || l.Mode == enforce.ModeShadow {
			continue
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Quote(l.Name))
		if when {
			b.WriteString(";when=")
			b.WriteString(string(l.CountWhen))
		}
		if l.CostHeader != "" {
			b.WriteString(";cost-header=")
			b.WriteString(strconv.Quote(strings.ToLower(l.CostHeader)))
		}
	}
	return b.String()
}

// settle corrects what st's admitted request was charged on limits once
// its response (status, header) is known: enforce.Settle works out what
// to give back or charge, and the store carries it out for the decision's
// time, so a window that has ended since is left alone. It runs after the
// handler returned, before the next request of the connection; a store
// that fails is logged and the charge stays as decided.
func (m *Middleware) settle(ctx context.Context, st *requestState, route string, limits []enforce.Limit, status int, header http.Header) {
	s := enforce.Settle(limits, status, header.Get)
	if len(s.Refund) == 0 && len(s.Charge) == 0 {
		return
	}
	at := st.decision.At
	if at.IsZero() {
		at = m.now()
	}
	c := st.caller
	req := enforce.Request{Subject: c.Subject, Key: c.Key, Route: route, Anchor: c.Anchor}
	if err := s.Apply(context.WithoutCancel(ctx), m.store, req, at); err != nil {
		m.log.WarnContext(ctx, "settling a request's cost after its response failed", "route", route, "plan", c.Plan, "err", err)
		return
	}
	if m.settled == nil {
		return
	}
	for _, l := range s.Refund {
		if l.Mode != enforce.ModeShadow {
			m.settled.RecordSettled(c, l.Name, -l.Cost)
		}
	}
	for _, l := range s.Charge {
		if l.Mode != enforce.ModeShadow {
			m.settled.RecordSettled(c, l.Name, l.Cost)
		}
	}
}
