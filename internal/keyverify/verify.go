// Package keyverify answers POST /v1/keys/verify: for services that only
// need to know, whether an API key is valid, whose it is, its plan, and
// every limit's limit, remaining and reset, without spending anything.
//
// Callers are services an operator declared, with one of their tokens
// ("Authorization: Bearer sluice_svc_..."): the answer names a developer,
// so it is not for anyone holding a key. The endpoint is rate limited
// itself, per client address before the token is checked (so guessing
// tokens is slow too) and per service after, in the engine's own store, so
// the limits hold across instances.
package keyverify

import (
	"cmp"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/httplimit"
	"github.com/sluicehq/sluice/internal/services"
)

// Path is where the handler is mounted.
const Path = "POST /v1/keys/verify"

// Resolver turns a key's secret into its caller: the snapshot holder, with
// no I/O.
type Resolver interface {
	ResolveKey(secret string) (enforce.Caller, error)
}

// Peeker reads limits without consuming anything: the engine's Decide,
// asked with Peek (a *enforce.Engine), as every way in asks it.
type Peeker interface {
	Decide(ctx context.Context, ask enforce.Ask) (enforce.Outcome, error)
}

// Limiter decides the endpoint's own limits: the engine's Store.
type Limiter interface {
	Allow(ctx context.Context, req enforce.Request) (enforce.Decision, error)
}

// Tokens authenticates a service token, returning its service's slug
// (services.Repo).
type Tokens interface {
	Authenticate(ctx context.Context, secret string) (string, error)
}

// Defaults of Options.
const (
	DefaultPerService = 6000 // verifies per minute per service
	DefaultPerAddress = 600  // requests per minute per client address
	maxBody           = 8 << 10
)

// Options configure the handler.
type Options struct {
	// PerService and PerAddress are the requests a minute a service and a
	// client address may make (0: the defaults).
	PerService, PerAddress int64
	// TrustedProxies are the peers whose X-Forwarded-For is believed.
	TrustedProxies []netip.Prefix
	Logger         *slog.Logger
	// Now is the clock of the resets (time.Now), for stores that do not
	// stamp their decisions.
	Now func() time.Time
}

// Handler serves POST /v1/keys/verify.
type Handler struct {
	keys    Resolver
	peek    Peeker
	limiter Limiter
	tokens  Tokens
	opts    Options
	log     *slog.Logger
	now     func() time.Time
	// perService and perAddress are the endpoint's own limits.
	perService, perAddress []enforce.Limit
}

// New returns the handler.
func New(keys Resolver, peek Peeker, limiter Limiter, tokens Tokens, opts Options) *Handler {
	opts.PerService = cmp.Or(opts.PerService, DefaultPerService)
	opts.PerAddress = cmp.Or(opts.PerAddress, DefaultPerAddress)
	h := &Handler{keys: keys, peek: peek, limiter: limiter, tokens: tokens, opts: opts, log: opts.Logger, now: opts.Now}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	if h.now == nil {
		h.now = time.Now
	}
	limit := func(name string, n int64) []enforce.Limit {
		return []enforce.Limit{{Name: name, Algorithm: enforce.TokenBucket, Limit: n, Window: time.Minute, Burst: max(n/6, 1)}}
	}
	h.perService = limit("keys-verify-service", opts.PerService)
	h.perAddress = limit("keys-verify-address", opts.PerAddress)
	return h
}

// Request is the body of a verification.
type Request struct {
	// Key is the API key's secret as the service received it.
	Key string `json:"key"`
	// Route, when set, is the route pattern the key would call ("GET
	// /api/search"): only the plan-wide limits and that route's tiers are
	// answered. Unset, every limit is.
	Route string `json:"route"`
}

// Answer is the body of a verification's 200.
type Answer struct {
	// Valid is false for a key that is malformed, unknown, revoked or
	// expired, or whose developer is disabled; nothing else is then set.
	Valid       bool   `json:"valid"`
	KeyID       int64  `json:"key_id,omitempty"`
	DeveloperID int64  `json:"developer_id,omitempty"`
	Plan        string `json:"plan,omitempty"`
	// Route echoes the request's route.
	Route  string                  `json:"route,omitempty"`
	Limits []httplimit.LimitStatus `json:"limits"`
}

// ErrorBody is the body of every answer that is not a 200.
type ErrorBody struct {
	Error   string `json:"error"`
	Message string `json:"message"`
	// RetryAfter, on a 429, is how long to wait in whole seconds.
	RetryAfter int64 `json:"retry_after,omitempty"`
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	ctx := r.Context()
	if !h.allow(w, r, "ip:"+addressBlock(httplimit.ClientIP(r, h.opts.TrustedProxies)), h.perAddress) {
		return
	}
	secret, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || secret == "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="sluice-services"`)
		writeError(w, http.StatusUnauthorized, "unauthorized", "Send a service token: \"Authorization: Bearer sluice_svc_...\" (an operator creates one per service).", 0)
		return
	}
	service, err := h.tokens.Authenticate(ctx, secret)
	if err != nil {
		if ctx.Err() == nil && !errors.Is(err, services.ErrBadToken) {
			h.log.ErrorContext(ctx, "keys verify: checking the service token", "err", err)
			writeError(w, http.StatusServiceUnavailable, "unavailable", "The service token could not be checked right now; retry shortly.", 1)
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="sluice-services", error="invalid_token"`)
		writeError(w, http.StatusUnauthorized, "unauthorized", "The service token is unknown or revoked.", 0)
		return
	}
	if !h.allow(w, r, "svc:"+service, h.perService) {
		return
	}
	req, problem := decode(w, r)
	if problem != "" {
		writeError(w, http.StatusBadRequest, "invalid_request", problem, 0)
		return
	}
	caller, err := h.keys.ResolveKey(req.Key)
	if errors.Is(err, enforce.ErrInvalidKey) {
		writeJSON(w, http.StatusOK, Answer{Valid: false, Limits: []httplimit.LimitStatus{}})
		return
	}
	if err != nil {
		// The resolver works on an in-memory snapshot: not loaded yet.
		h.log.ErrorContext(ctx, "keys verify: resolving the key", "err", err)
		writeError(w, http.StatusServiceUnavailable, "unavailable", "Keys cannot be checked right now; retry shortly.", 1)
		return
	}
	a := Answer{Valid: true, KeyID: caller.KeyID, DeveloperID: caller.UserID, Plan: caller.Plan, Route: req.Route, Limits: []httplimit.LimitStatus{}}
	// Shadow limits are never shown; without a route, every tier is.
	visible := caller
	visible.Limits = nil
	for _, l := range caller.Limits {
		if l.Mode != enforce.ModeShadow {
			visible.Limits = append(visible.Limits, l)
		}
	}
	if len(visible.Limits) > 0 {
		before := h.now()
		o, err := h.peek.Decide(ctx, enforce.Ask{Caller: visible, Route: req.Route, Peek: true, AllRoutes: req.Route == ""})
		d := o.Decision
		if err != nil {
			h.log.WarnContext(ctx, "keys verify: peek failed", "err", err)
			writeError(w, http.StatusServiceUnavailable, "unavailable", "Rate-limit state cannot be read right now; retry shortly.", 1)
			return
		}
		at := d.At
		if at.IsZero() {
			at = before
		}
		for _, l := range d.Layers {
			a.Limits = append(a.Limits, status(l, at))
		}
	}
	writeJSON(w, http.StatusOK, a)
}

// allow spends one of subject's requests of limits, answering 429 (and
// returning false) when there is none left. A failing store lets the
// request through: the endpoint spends nothing, and refusing every
// verification while Redis is down would take the services down with it.
func (h *Handler) allow(w http.ResponseWriter, r *http.Request, subject string, limits []enforce.Limit) bool {
	d, err := h.limiter.Allow(r.Context(), enforce.Request{Subject: "keys-verify:" + subject, Limits: limits})
	if err != nil {
		h.log.WarnContext(r.Context(), "keys verify: own rate limit unavailable; let through", "err", err)
		return true
	}
	if d.Allowed {
		return true
	}
	retry := max(int64((d.Binding().RetryAfter+time.Second-1)/time.Second), 1)
	w.Header().Set("Retry-After", strconv.FormatInt(retry, 10))
	writeError(w, http.StatusTooManyRequests, "rate_limit_exceeded", "Too many verifications; retry after "+strconv.FormatInt(retry, 10)+" s.", retry)
	return false
}

// addressBlock is what the per-address limit counts: an IPv4 address, an
// IPv6 address's /64 (one host usually holds a whole /64, and would
// otherwise get a limit per address it picks).
func addressBlock(a netip.Addr) string {
	a = a.Unmap()
	if a.Is6() {
		if p, err := a.Prefix(64); err == nil {
			return p.String()
		}
	}
	return a.String()
}

// decode reads the body, or says what is wrong with it.
func decode(w http.ResponseWriter, r *http.Request) (Request, string) {
	var req Request
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		return req, "The body must be JSON (Content-Type: application/json)."
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return req, "The body is larger than 8 KiB."
		}
		if errors.Is(err, io.EOF) {
			return req, "The body must be a JSON object with the field \"key\"."
		}
		return req, "The body is not a JSON object of \"key\" and \"route\"."
	}
	if dec.More() {
		return req, "The body must hold one JSON object."
	}
	switch {
	case req.Key == "":
		return req, "The field \"key\" is required."
	case len(req.Key) > 256:
		return req, "The field \"key\" is longer than any key."
	case len(req.Route) > 200:
		return req, "The field \"route\" is longer than any route."
	}
	if req.Route != "" {
		method, path, ok := strings.Cut(req.Route, " ")
		if !ok || method == "" || !strings.HasPrefix(path, "/") {
			return req, "The field \"route\" must be a route pattern such as \"GET /api/search\"."
		}
	}
	return req, ""
}

// status is one layer as /api/rate-limit-status shows it.
func status(l enforce.LayerResult, at time.Time) httplimit.LimitStatus {
	ceil := func(d time.Duration) int64 { return max(int64((d+time.Second-1)/time.Second), 0) }
	window := max(ceil(max(l.Limit.Window, l.Period)), 1)
	if l.Limit.Algorithm == enforce.Concurrency {
		window = 0 // requests in flight, not per window
	}
	reset := at.Add(l.ResetAfter)
	resetUnix := reset.Unix()
	if reset.Nanosecond() > 0 {
		resetUnix++
	}
	return httplimit.LimitStatus{
		Policy: l.Limit.Name, Route: l.Limit.Route, Algorithm: l.Limit.Algorithm, Mode: cmp.Or(l.Limit.Mode, enforce.ModeReject),
		Limit: l.Limit.Limit, WindowSeconds: window, Period: l.Limit.Period, Burst: l.Limit.Burst, Cost: max(l.Limit.Cost, 1),
		Remaining: max(l.Remaining, 0), Reset: resetUnix, ResetAfterSeconds: ceil(l.ResetAfter),
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, kind, message string, retry int64) {
	if retry > 0 && w.Header().Get("Retry-After") == "" {
		w.Header().Set("Retry-After", strconv.FormatInt(retry, 10))
	}
	writeJSON(w, code, ErrorBody{Error: kind, Message: message, RetryAfter: retry})
}

// OpenAPIPath is where the service API's OpenAPI document is served.
const OpenAPIPath = "GET /v1/openapi.json"

// openAPIDocument describes Path; the tests hold real answers to it.
//
//go:embed openapi.json
var openAPIDocument []byte

// OpenAPI serves the OpenAPI 3.1 document of the verification API. It
// needs no token.
func OpenAPI() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "public, max-age=300")
		_, _ = w.Write(openAPIDocument)
	})
}
