package httplimit

import (
	"net/http"
	"net/netip"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/requestlog"
)

// RequestLog is told of every request the middleware decides, once its
// answer is known: *requestlog.Writer, which copies the entry into a
// bounded buffer and samples and writes it off the request path. Log is
// called on the request path and must not block.
type RequestLog interface {
	Log(requestlog.Entry)
}

// entry is the request log's entry for caller's request on route, decided
// by d (whose At is the store's clock; m's clock when the store gives
// none) and answered status by Sluice itself (0: not yet known).
func (m *Middleware) entry(way string, caller enforce.Caller, route string, addr func() netip.Addr, d *enforce.Decision, o requestlog.Outcome, status int) requestlog.Entry {
	e := requestlog.Entry{WayIn: way, Outcome: o, Plan: caller.Plan, Route: route,
		KeyID: caller.KeyID, UserID: caller.UserID, Status: status}
	if caller.KeyID == 0 && caller.UserID == 0 {
		e.Addr = addr()
	}
	if d != nil {
		e.At = d.At
		if d.Local {
			e.StoreDegraded = "local"
		} else if d.RegionShare {
			e.StoreDegraded = "region-share"
		}
	}
	if e.At.IsZero() {
		e.At = m.now()
	}
	return e
}

// logRefusal logs a request Sluice answered itself (401, 429, 503): layer
// is the layer that fired, retry the Retry-After sent.
func (m *Middleware) logRefusal(r *http.Request, caller enforce.Caller, route string, d *enforce.Decision, o requestlog.Outcome, status int, layer string, retry int64) {
	if m.reqlog == nil {
		return
	}
	e := m.entry(m.wayIn, caller, route, func() netip.Addr { return ClientIP(r, m.trusted) }, d, o, status)
	e.Layer = layer
	e.RetryAfter = time.Duration(retry) * time.Second
	if o == requestlog.Unavailable {
		e.StoreDegraded = "store-unavailable"
	}
	m.reqlog.Log(e)
}

// serveNext runs next for an admitted request of st and, with a request
// log, logs it once next has returned, with the status next answered and
// how long it took (the protected API's, when this way in serves it).
// layer names the degrade-mode layer exceeded, degraded the store's mark.
// settle, when not nil, are the limits the request was charged on of
// which some count only some responses or take their cost from a response
// header: they are settled once next has returned (see settle).
func (m *Middleware) serveNext(w http.ResponseWriter, r *http.Request, st *requestState, route string, o requestlog.Outcome, layer, degraded string, settle []enforce.Limit, next http.Handler) {
	if m.reqlog == nil && settle == nil {
		next.ServeHTTP(w, st.attach(r))
		return
	}
	if m.wayIn == WayInCheck {
		// The gateway serves the request after this answer: Sluice never
		// sees the protected API's response, so it settles nothing either.
		next.ServeHTTP(w, st.attach(r))
		if m.reqlog != nil {
			m.reqlog.Log(m.logEntry(r, st, route, o, layer, degraded))
		}
		return
	}
	if settle != nil {
		w.Header().Set(HeaderCount, countText(settle))
	}
	sw := &statusWriter{ResponseWriter: w}
	start := time.Since(m.epoch)
	next.ServeHTTP(sw, st.attach(r))
	latency := time.Since(m.epoch) - start
	status := sw.status
	if status == 0 {
		status = http.StatusOK // net/http's answer for a handler that wrote nothing
	}
	if settle != nil {
		m.settle(r.Context(), st, route, settle, status, w.Header())
	}
	if m.reqlog != nil {
		e := m.logEntry(r, st, route, o, layer, degraded)
		e.Status, e.UpstreamStatus, e.Latency = status, status, latency
		m.reqlog.Log(e)
	}
}

// logEntry is the request log's entry of st's admitted request.
func (m *Middleware) logEntry(r *http.Request, st *requestState, route string, o requestlog.Outcome, layer, degraded string) requestlog.Entry {
	var d *enforce.Decision
	if st.decision.Layers != nil {
		d = &st.decision
	}
	e := m.entry(m.wayIn, st.caller, route, func() netip.Addr { return ClientIP(r, m.trusted) }, d, o, 0)
	e.Layer = layer
	if degraded != "" {
		e.StoreDegraded = degraded
	}
	return e
}

// statusWriter remembers the status a handler answered. Unwrap lets
// http.ResponseController reach the connection's own writer (flushes,
// deadlines, hijacking), as httputil.ReverseProxy and streaming handlers
// do.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(status int) {
	if s.status == 0 && status >= 200 {
		s.status = status
	}
	s.ResponseWriter.WriteHeader(status)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Flush flushes the response for handlers that assert http.Flusher.
func (s *statusWriter) Flush() {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	_ = http.NewResponseController(s.ResponseWriter).Flush()
}

// Unwrap returns the wrapped writer, for http.ResponseController.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }
