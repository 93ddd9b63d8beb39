package httplimit

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/requestlog"
)

// Credentials are what a caller presents to a way in that is not an HTTP
// request (the Envoy rate-limit service): the values its gateway forwards.
type Credentials struct {
	// APIKey is an X-API-Key value, Authorization an Authorization value
	// (the latter wins when both are set); neither means anonymous.
	APIKey, Authorization string
	// Addr is the client address: an anonymous caller is limited by it,
	// and a key limited to address ranges (enforce.Scope) is checked on it.
	Addr netip.Addr
	// Method is the original request's method, for keys limited to routes
	// or to reading ("" when unknown: only a route's own method counts).
	Method string
}

// Verdict is the middleware's answer to a Check, as the HTTP way in would
// give it: the engine's Outcome and what it renders to.
type Verdict struct {
	// Outcome is the engine's answer, its shadow layers hidden; its layers
	// are empty when no decision was made.
	Outcome enforce.Outcome
	// Status is 200 when the request may proceed (admitted, queued after
	// its wait, degraded, failed open), else 401, 429 or 503.
	Status int
	// Header holds the response fields: the rate-limit fields of every
	// decided request, and Retry-After, WWW-Authenticate and the degraded
	// marks where they apply.
	Header http.Header
	// Body is the JSON body of a refusal (a RejectionBody or an
	// ErrorBody), nil when admitted.
	Body []byte
	// Caller is who asked, once resolved (the zero Caller for a key
	// refused as unusable): what a way in tells the upstream.
	Caller enforce.Caller
}

// Check decides one request that arrives without an http.Request: the
// caller presenting cred on route (a ServeMux pattern, "" for none),
// counting as hits requests. Identity, limits, failure mode, metrics and
// records are the middleware's own, as for Enforce; a queued request's
// wait (a leaky bucket's) is slept before Check returns, but a full
// queue-mode concurrency limit refuses at once: its gateway bounds the
// call more tightly than MaxQueueWait. Concurrency slots are kept, a
// degraded request's too: such a
// way in reports no completion, so each lasts the middleware's slot lease
// (WithSlotLease: PORTAL_GATEWAY_SLOT_LEASE in the portal), which bounds
// the requests admitted per lease; releasing them at once would let every
// request through.
// With a request log, the decision is logged under the middleware's way
// in (WayInEnvoy for the rate-limit service): Sluice never sees the
// response of a request it admits this way.
func (m *Middleware) Check(ctx context.Context, cred Credentials, route string, hits int64) Verdict {
	v, lg := m.check(ctx, cred, route, hits)
	if m.reqlog != nil && lg.outcome != 0 {
		e := m.entry(m.wayIn, lg.caller, route, func() netip.Addr { return cred.Addr.Unmap().WithZone("") },
			&v.Outcome.Decision, lg.outcome, 0)
		if !lg.outcome.Reached() {
			e.Status = v.Status
		}
		e.Layer, e.RetryAfter = lg.layer, time.Duration(lg.retry)*time.Second
		if v.Outcome.Degraded != enforce.NotDegraded {
			e.StoreDegraded = string(v.Outcome.Degraded)
		}
		m.reqlog.Log(e)
	}
	return v
}

// checked is what the request log is told of a Check: outcome 0 logs
// nothing (no limit applied, or the request was cancelled).
type checked struct {
	caller  enforce.Caller
	outcome requestlog.Outcome
	layer   string
	retry   int64
}

func (m *Middleware) check(ctx context.Context, cred Credentials, route string, hits int64) (Verdict, checked) {
	v := Verdict{Status: http.StatusOK, Header: http.Header{}}
	caller, ok := m.credentialCaller(ctx, &v, cred, route)
	if !ok {
		if v.Status == http.StatusUnauthorized {
			return v, checked{outcome: requestlog.Unauthorized}
		}
		return v, checked{}
	}
	v.Caller = caller
	hits = max(hits, 1)
	start := time.Since(m.epoch)
	var before time.Time
	if !m.stamped {
		before = m.now()
	}
	tctx, span := m.traceDecision(ctx, caller, route)
	sctx, storeSpan := m.traceStore(tctx, span)
	out, err := m.engine.Decide(sctx, enforce.Ask{Caller: caller, Route: route, Hits: hits})
	endStore(storeSpan, err)
	endDecision(span, out.Decision, out.Degraded, err)
	if len(out.Limits) == 0 && err == nil {
		return v, checked{caller: caller, outcome: requestlog.Admitted}
	}
	m.metrics.observe(route, time.Since(m.epoch)-start)
	if err != nil {
		m.checkFailed(ctx, &v, caller, route, err)
		if v.Status == http.StatusServiceUnavailable && ctx.Err() == nil {
			return v, checked{caller: caller, outcome: requestlog.Unavailable, retry: 1}
		}
		return v, checked{}
	}
	if out.Degraded == enforce.DegradedStoreUnavailable {
		m.metrics.count(route, caller.Plan, "failed_open")
		m.recordDecision(caller, route, hits, true)
		v.Outcome = out
		v.Header.Set(HeaderStoreDegraded, string(out.Degraded))
		return v, checked{caller: caller, outcome: requestlog.FailedOpen}
	}
	if enforce.HasShadow(out.Limits) {
		m.countShadow(caller, out.Decision)
		out.Decision = out.Visible()
	}
	v.Outcome = out
	var vals [limitHeaderCount]string
	writeLimitHeaders(v.Header, out.Decision, m.decidedAt(out.Decision, before), nil, &vals)
	if out.Degraded != enforce.NotDegraded {
		v.Header.Set(HeaderStoreDegraded, string(out.Degraded))
	}
	if !out.Allowed {
		if exceeded, degrade := out.Degradable(); degrade {
			m.metrics.count(route, caller.Plan, "degraded")
			m.recordDecision(caller, route, hits, true)
			v.Header.Set(HeaderDegraded, exceeded)
			return v, checked{caller: caller, outcome: requestlog.Degraded, layer: exceeded}
		}
		m.metrics.count(route, caller.Plan, "rejected")
		m.recordDecision(caller, route, hits, false)
		retry, body := rejection(out.Decision)
		v.refuse(http.StatusTooManyRequests, body)
		v.Header.Set("Retry-After", strconv.FormatInt(retry, 10))
		return v, checked{caller: caller, outcome: requestlog.Rejected, layer: firedLayer(out.Decision), retry: retry}
	}
	if out.Delay > 0 {
		v.Header.Set(HeaderQueueDelay, strconv.FormatInt(out.Delay.Milliseconds(), 10))
		if out.Delay > m.maxWait {
			m.metrics.count(route, caller.Plan, "rejected")
			m.recordDecision(caller, route, hits, false)
			retry := max(ceilSeconds(out.Delay), 1)
			var limit int64
			var policy string
			if fired, ok := out.Fired(); ok {
				limit, policy = fired.Limit.Limit, fired.Limit.Name
			}
			msg := "The queue for this endpoint is too long to wait in. Retry in " + strconv.FormatInt(retry, 10) + " s."
			v.refuse(http.StatusTooManyRequests, rejectionBody(retry, limit, policy, []byte(msg)))
			v.Header.Set("Retry-After", strconv.FormatInt(retry, 10))
			return v, checked{caller: caller, outcome: requestlog.Rejected, layer: policy, retry: retry}
		}
		if !enforce.Sleep(ctx, out.Delay) {
			m.metrics.count(route, caller.Plan, "cancelled")
			v.refuseError(http.StatusServiceUnavailable, "queue_wait_cancelled", "The request was cancelled while it waited its turn.")
			return v, checked{}
		}
		m.metrics.count(route, caller.Plan, "queued")
		m.recordDecision(caller, route, hits, true)
		return v, checked{caller: caller, outcome: requestlog.Queued}
	}
	m.metrics.count(route, caller.Plan, "admitted")
	m.recordDecision(caller, route, hits, true)
	return v, checked{caller: caller, outcome: requestlog.Admitted}
}

// credentialCaller resolves the caller presenting cred, refusing v (and
// returning false) when a presented key is unusable.
func (m *Middleware) credentialCaller(ctx context.Context, v *Verdict, cred Credentials, route string) (enforce.Caller, bool) {
	var apiKeys []string
	if cred.APIKey != "" {
		apiKeys = []string{cred.APIKey}
	}
	secret, presented := credentialKey(cred.Authorization, apiKeys)
	if !presented {
		return m.resolver.Anonymous(cred.Addr.Unmap().WithZone("")), true
	}
	if secret != "" {
		caller, err := m.resolver.ResolveKey(secret)
		if err == nil {
			if reason, ok := caller.Scope.Permits(cred.Method, route, cred.Addr); !ok {
				m.metrics.count(route, caller.Plan, "forbidden")
				v.refuseError(http.StatusForbidden, "key_out_of_scope", reason)
				return enforce.Caller{}, false
			}
			return caller, true
		}
		if !errors.Is(err, enforce.ErrInvalidKey) {
			m.log.ErrorContext(ctx, "resolving API key", "err", err, "route", route)
			v.refuseError(http.StatusServiceUnavailable, "identity_unavailable",
				"The API key could not be checked right now; retry shortly.")
			return enforce.Caller{}, false
		}
	}
	m.metrics.count(route, "", "unauthorized")
	v.Header.Set("WWW-Authenticate", `Bearer error="invalid_token"`)
	v.refuseError(http.StatusUnauthorized, "invalid_api_key", invalidKeyMessage)
	return enforce.Caller{}, false
}

// checkFailed refuses v for a decision that failed with the failure mode
// closed (an open one admits inside the engine).
func (m *Middleware) checkFailed(ctx context.Context, v *Verdict, caller enforce.Caller, route string, err error) {
	if ctx.Err() != nil {
		m.metrics.count(route, caller.Plan, "cancelled")
		v.refuseError(http.StatusServiceUnavailable, "request_cancelled", "The request was cancelled.")
		return
	}
	m.logStoreFailure(ctx, route, err)
	m.metrics.count(route, caller.Plan, "unavailable")
	v.Header.Set("Retry-After", "1")
	v.refuseError(http.StatusServiceUnavailable, "rate_limit_unavailable",
		"Rate limits cannot be checked right now, so the request was not served; retry shortly.")
}

func (v *Verdict) refuse(status int, body []byte) {
	v.Status, v.Body = status, body
	v.Header.Set("Content-Type", "application/json")
	v.Header.Set("X-Content-Type-Options", "nosniff")
}

func (v *Verdict) refuseError(status int, code, message string) {
	body, _ := json.Marshal(ErrorBody{Error: code, Message: message})
	v.refuse(status, append(body, '\n'))
}
