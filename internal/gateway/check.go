package gateway

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/sluicehq/sluice/internal/enforce/httplimit"
)

// CheckPath is where the forward-auth endpoint is mounted.
const CheckPath = "/v1/check"

// HeaderError carries the JSON body of a check's 401 or 429 answer in a
// header too: nginx's auth_request passes a subrequest's headers to the
// configuration but never its body, so the nginx configuration rebuilds the
// client's answer from it (see testdata/nginx.conf).
const HeaderError = "Sluice-Error"

// HeaderRoute names the service and route a check matched ("demo GET
// /api/items/{id}"), absent when no route matched; a gateway may log it.
const HeaderRoute = "Sluice-Route"

// unavailableRetryAfter is the Retry-After, in seconds, of a check's 503
// that carries none of its own.
const unavailableRetryAfter = "1"

// maxErrorBody bounds what a check buffers of an error answer; the engine's
// bodies are a few hundred bytes.
const maxErrorBody = 4096

// Check is the forward-auth decision endpoint: GET /v1/check (any method
// is accepted, since gateways differ). The request it decides is described
// by the gateway's headers:
//
//   - X-Forwarded-Method, X-Forwarded-Uri and X-Forwarded-Host (Traefik,
//     Caddy), or X-Original-Method and X-Original-URI (nginx auth_request),
//     the host then from X-Forwarded-Host or the check's own Host;
//   - the caller's key from Authorization: Bearer or X-API-Key, as the
//     gateway forwards the original request's headers;
//   - the client address from X-Forwarded-For when the gateway is a trusted
//     proxy (PORTAL_TRUSTED_PROXIES), else the gateway's own address.
//
// The original method, host and URI are matched against the declared
// services' routes with ServeMux rules; a request matching none is held to
// its plan-wide limits only, as the embedded middleware holds a request with
// no pattern. The answer is 200 (admitted, with every rate-limit header for
// the gateway to copy onto the response and the caller's identity for it to
// pass to the upstream: HeaderKeyID, HeaderDeveloperID, HeaderPlan,
// HeaderKeyScope), 429 (rejected, with Retry-After and
// the JSON body), 401 (a bad key), 400 (the gateway sent no original method
// or URI) or the engine's 503 when limits cannot be checked.
type Check struct {
	catalogs Catalogs
	enforcer Enforcer
	log      *slog.Logger
}

// NewCheck returns the forward-auth endpoint deciding with enforcer on the
// routes of catalogs' current catalog.
func NewCheck(catalogs Catalogs, enforcer Enforcer, logger *slog.Logger) *Check {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Check{catalogs: catalogs, enforcer: enforcer, log: logger}
}

// Original is the request a gateway asks about.
type Original struct {
	Method, Host, URI string
}

// OriginalFrom reads the original request from a forward-auth request's
// headers; ok is false when the method or the URI is missing.
func OriginalFrom(r *http.Request) (o Original, ok bool) {
	h := r.Header
	o.Method = firstOf(h, "X-Forwarded-Method", "X-Original-Method")
	o.URI = firstOf(h, "X-Forwarded-Uri", "X-Original-Uri")
	o.Host = firstOf(h, "X-Forwarded-Host")
	if o.Host == "" {
		o.Host = r.Host
	}
	return o, o.Method != "" && o.URI != ""
}

func firstOf(h http.Header, names ...string) string {
	for _, n := range names {
		if v := h.Get(n); v != "" {
			return v
		}
	}
	return ""
}

// admitted answers the gateway's question: yes. The rate-limit headers
// are already written by the engine; the caller's identity (identity.go)
// is added for the gateway to pass to the upstream. A request holding concurrency slots keeps them
// past the check, whose gateway tells Sluice nothing when the request it
// asked about completes: they last the lease (PORTAL_CONCURRENCY_LEASE)
// unless released at ReleasePath with the token in HeaderLease.
var admitted = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	if caller, ok := httplimit.CallerFrom(r.Context()); ok {
		setIdentity(w.Header(), caller)
	}
	if l := httplimit.KeepSlots(r.Context()); l != nil {
		w.Header().Set(HeaderLease, l.Token())
		w.Header().Set(HeaderLeaseExpires, strconv.FormatInt(l.Expires().Unix(), 10))
	}
	w.Header().Set("Content-Length", "0")
	w.WriteHeader(http.StatusOK)
})

func (c *Check) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o, ok := OriginalFrom(r)
	if !ok {
		writeProblem(w, http.StatusBadRequest, "missing_original_request",
			"Send the original request's method and URI as X-Forwarded-Method and X-Forwarded-Uri, or X-Original-Method and X-Original-URI.")
		return
	}
	route := ""
	if svc, pattern, ok := c.catalogs.Catalog().Match(o.Method, o.Host, o.URI); ok {
		route = pattern
		w.Header().Set(HeaderRoute, svc.Slug+" "+pattern)
	}
	rec := &errorCapture{ResponseWriter: w}
	// A key limited to reading or to routes is checked on the original
	// request's method, not the check's own.
	r = r.WithContext(httplimit.WithOriginalMethod(r.Context(), o.Method))
	c.enforcer.Enforce(rec, r, route, admitted)
	rec.finish()
}

// errorCapture passes an admitted answer straight through and holds back
// an error answer until its body is known, to copy the body into
// HeaderError before the status line goes out.
type errorCapture struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (e *errorCapture) WriteHeader(status int) {
	if e.status != 0 {
		return
	}
	e.status = status
	if status < 400 {
		e.ResponseWriter.WriteHeader(status)
	}
}

func (e *errorCapture) Write(b []byte) (int, error) {
	if e.status == 0 {
		e.WriteHeader(http.StatusOK)
	}
	if e.status < 400 {
		return e.ResponseWriter.Write(b)
	}
	if e.body.Len()+len(b) <= maxErrorBody {
		e.body.Write(b)
	}
	return len(b), nil
}

func (e *errorCapture) finish() {
	if e.status < 400 {
		return
	}
	if json.Valid(e.body.Bytes()) {
		var compact bytes.Buffer
		if json.Compact(&compact, e.body.Bytes()) == nil {
			e.Header().Set(HeaderError, compact.String())
		}
	}
	if e.status == http.StatusServiceUnavailable && e.Header().Get("Retry-After") == "" {
		// Gateways pass a refusal on as it is; a client told 503 is told
		// when to come back, as the engine's own 503 does.
		e.Header().Set("Retry-After", unavailableRetryAfter)
	}
	e.Header().Set("Content-Length", strconv.Itoa(e.body.Len()))
	e.ResponseWriter.WriteHeader(e.status)
	_, _ = e.ResponseWriter.Write(e.body.Bytes())
}

func writeProblem(w http.ResponseWriter, status int, code, message string) {
	b, _ := json.Marshal(struct {
		Error   string `json:"error"`
		Message string `json:"message"`
	}{code, message})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set(HeaderError, string(b))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
