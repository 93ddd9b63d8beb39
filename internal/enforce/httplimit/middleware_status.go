package httplimit

import (
	"net/http"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
)

// StatusBody is the JSON answer of StatusHandler.
type StatusBody struct {
	// Plan is the slug of the caller's plan.
	Plan string `json:"plan"`
	// Limits lists every limit of the plan, in plan order.
	Limits []LimitStatus `json:"limits"`
}

// LimitStatus is one limit's current state for the caller.
type LimitStatus struct {
	// Policy is the limit's name, as in RateLimit-Policy.
	Policy string `json:"policy"`
	// Route is the ServeMux pattern the limit applies to; "" for plan-wide.
	Route     string            `json:"route"`
	Algorithm enforce.Algorithm `json:"algorithm"`
	Mode      enforce.Mode      `json:"mode"`
	// Limit units of cost per WindowSeconds; Burst and Cost as configured.
	// For a quota, WindowSeconds is the current period's length and Period
	// names it (day, month or year); Reset is then the renewal. A
	// concurrency limit has WindowSeconds 0: Limit requests in flight, of
	// which Remaining are free.
	Limit         int64          `json:"limit"`
	WindowSeconds int64          `json:"window_seconds"`
	Period        enforce.Period `json:"period,omitempty"`
	Burst         int64          `json:"burst"`
	Cost          int64          `json:"cost"`
	// Remaining units right now, consuming nothing to find out.
	Remaining int64 `json:"remaining"`
	// Reset is the unix time (seconds) when the limit is fully available
	// again; ResetAfterSeconds the same as a delay.
	Reset             int64 `json:"reset"`
	ResetAfterSeconds int64 `json:"reset_after_seconds"`
}

// StatusHandler answers GET /api/rate-limit-status: every limit of the
// caller's plan (plan-wide and every route's tier) with limit, remaining,
// reset and window. It consumes nothing: all limits go to one Store.Peek, so
// the answer is a consistent snapshot of the caller's counters. Mount it
// without Wrap (Wrap would spend the plan-wide limit on it). It identifies
// the caller as Wrap does (401 for an unusable key) and sets the rate-limit
// headers for all the plan's limits.
func (m *Middleware) StatusHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		caller, ok := m.identify(w, r, r.Pattern)
		if !ok {
			return
		}
		body := StatusBody{Plan: caller.Plan, Limits: []LimitStatus{}}
		w.Header().Set("Cache-Control", "no-store")
		if len(caller.Limits) == 0 {
			writeJSON(w, http.StatusOK, body)
			return
		}
		var before time.Time
		if !m.stamped {
			before = m.now()
		}
		d, err := m.store.Peek(r.Context(), enforce.Request{Subject: caller.Subject, Key: caller.Key, Route: r.Pattern, Limits: caller.Limits, Anchor: caller.Anchor})
		if err != nil {
			m.log.WarnContext(r.Context(), "rate-limit status peek failed", "err", err)
			w.Header().Set("Retry-After", "1")
			writeError(w, http.StatusServiceUnavailable, "rate_limit_unavailable",
				"Rate-limit state cannot be read right now; retry shortly.")
			return
		}
		d = d.Visible()
		at := m.decidedAt(d, before)
		writeLimitHeaders(w.Header(), d, at, nil, new([limitHeaderCount]string))
		for _, l := range d.Layers {
			window := max(ceilSeconds(max(l.Limit.Window, l.Period)), 1)
			if l.Limit.Algorithm == enforce.Concurrency {
				window = 0 // requests in flight, not per window
			}
			body.Limits = append(body.Limits, LimitStatus{
				Policy:            l.Limit.Name,
				Route:             l.Limit.Route,
				Algorithm:         l.Limit.Algorithm,
				Mode:              modeOrDefault(l.Limit.Mode),
				Limit:             l.Limit.Limit,
				WindowSeconds:     window,
				Period:            l.Limit.Period,
				Burst:             l.Limit.Burst,
				Cost:              max(l.Limit.Cost, 1),
				Remaining:         max(l.Remaining, 0),
				Reset:             resetUnix(at, l.ResetAfter),
				ResetAfterSeconds: ceilSeconds(l.ResetAfter),
			})
		}
		writeJSON(w, http.StatusOK, body)
	})
}

func modeOrDefault(m enforce.Mode) enforce.Mode {
	if m == "" {
		return enforce.ModeReject
	}
	return m
}

// unixCeil is t in unix seconds, rounded up.
func unixCeil(t time.Time) int64 {
	u := t.Unix()
	if t.Nanosecond() > 0 {
		u++
	}
	return u
}
