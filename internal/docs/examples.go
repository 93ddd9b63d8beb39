package docs

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/httplimit"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/sampleapi"
)

// maxDrain bounds the requests sent to reach an over-limit example; a limit
// allowing more in one go (a large plan-wide quota) shows no 429 example.
const maxDrain = 20000

// Response is one answer recorded from the middleware.
type Response struct {
	Status int
	// Headers are the rate-limit headers, in a fixed order.
	Headers []Header
	// Body is the JSON body, indented; "" when the middleware wrote none.
	Body string
}

// Header is one response header.
type Header struct{ Name, Value string }

// Examples are real answers of the enforcement middleware for one plan on
// one endpoint, with the counters starting empty.
type Examples struct {
	// First answers the first request.
	First Response
	// Over is the first answer that was not a plain admission (queued,
	// degraded or refused), sent after OverAfter admitted requests; nil when
	// none came within the bound.
	Over      *Response
	OverAfter int
	// Rejected is the first 429, after RejectedAfter requests; nil when none
	// came within the bound.
	Rejected      *Response
	RejectedAfter int
}

// shownHeaders are the headers examples record, in this order.
var shownHeaders = []string{
	"Content-Type", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset",
	"RateLimit-Policy", "RateLimit", "Retry-After", httplimit.HeaderDegraded, httplimit.HeaderQueueDelay,
}

// rig is the middleware over a fresh memory store on a frozen clock, with
// one caller holding one plan's limits.
type rig struct{ mux *http.ServeMux }

func newRig(p plans.Plan, now time.Time) (*rig, *httplimit.Middleware) {
	clock := func() time.Time { return now }
	limits := make([]enforce.Limit, len(p.Limits))
	for i, l := range p.Limits {
		limits[i] = l.Enforce(p.Slug)
	}
	caller := enforce.Caller{Subject: "key:example", KeyID: 1, UserID: 1, Plan: p.Slug, Limits: limits}
	store := memstore.New(memstore.Options{Now: clock, DisableUsage: true})
	mw := httplimit.NewMiddleware(store, fixedCaller{caller}, httplimit.Options{Now: clock})
	return &rig{mux: http.NewServeMux()}, mw
}

// recorder is a minimal http.ResponseWriter reused across the thousands of
// requests a drain can take; httptest.ResponseRecorder clones headers on
// every write, which made building the docs noticeably slow.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (w *recorder) Header() http.Header { return w.header }

func (w *recorder) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *recorder) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.body.Write(b)
}

func (w *recorder) reset() {
	clear(w.header)
	w.status = 0
	w.body.Reset()
}

// response converts what was recorded into a Response.
func (w *recorder) response() Response {
	resp := Response{Status: w.status}
	for _, name := range shownHeaders {
		if v := w.header.Get(name); v != "" {
			resp.Headers = append(resp.Headers, Header{name, v})
		}
	}
	if b := w.body.Bytes(); len(b) > 0 && json.Valid(b) {
		var out bytes.Buffer
		if json.Indent(&out, b, "", "  ") == nil {
			resp.Body = strings.TrimSpace(out.String())
		}
	}
	return resp
}

// do sends one request for e and leaves the answer in w.
func (r *rig) do(e Endpoint, w *recorder) {
	host := e.ExampleHost
	if host == "" {
		host = "api.example"
	}
	w.reset()
	req, err := http.NewRequestWithContext(context.Background(), e.Method, "http://"+host+e.ExamplePath, strings.NewReader(e.ExampleBody))
	if err != nil {
		// A declared route's example path that is no URL: no answer, which
		// examples reports as an error naming the route.
		return
	}
	req.RemoteAddr = "192.0.2.1:1234"
	req.Header.Set("Authorization", "Bearer sk_example")
	r.mux.ServeHTTP(w, req)
}

// examples records plan p's answers on endpoint e: the first request, and
// requests repeated until the first non-plain and the first refused answer.
func examples(p plans.Plan, e Endpoint, now time.Time) (Examples, error) {
	r, mw := newRig(p, now)
	// WrapAsync: a queued request reports its delay instead of sleeping on a
	// frozen clock.
	r.mux.Handle(e.Route, mw.WrapAsync(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(e.Status)
	})))
	var ex Examples
	w := &recorder{header: http.Header{}}
	r.do(e, w)
	ex.First = w.response()
	if ex.First.Status != e.Status {
		return Examples{}, fmt.Errorf("first request answered %d, want %d", ex.First.Status, e.Status)
	}
	for i := 1; i < maxDrain; i++ {
		r.do(e, w)
		plain := w.status == e.Status && w.header.Get(httplimit.HeaderDegraded) == "" &&
			w.header.Get(httplimit.HeaderQueueDelay) == ""
		if !plain && ex.Over == nil {
			resp := w.response()
			ex.Over, ex.OverAfter = &resp, i
		}
		if w.header.Get(httplimit.HeaderDegraded) != "" {
			// A degraded request consumed nothing (decisions are all or
			// nothing), so on a frozen clock every further one is degraded
			// too: this endpoint never answers 429 from here.
			break
		}
		if w.status == http.StatusTooManyRequests {
			if ex.OverAfter == i {
				ex.Rejected = ex.Over
			} else {
				resp := w.response()
				ex.Rejected = &resp
			}
			ex.RejectedAfter = i
			break
		}
	}
	return ex, nil
}

// statusExample is plan p's answer from GET /api/rate-limit-status, fresh.
func statusExample(p plans.Plan, now time.Time) (Response, error) {
	r, mw := newRig(p, now)
	r.mux.Handle(sampleapi.RouteStatus, mw.StatusHandler())
	w := &recorder{header: http.Header{}}
	r.do(Endpoint{Method: "GET", ExamplePath: "/api/rate-limit-status"}, w)
	resp := w.response()
	if resp.Status != http.StatusOK {
		return Response{}, fmt.Errorf("status endpoint answered %d", resp.Status)
	}
	return resp, nil
}

func header(r Response, name string) string {
	for _, h := range r.Headers {
		if h.Name == name {
			return h.Value
		}
	}
	return ""
}

// fixedCaller resolves every request to one caller.
type fixedCaller struct{ c enforce.Caller }

func (f fixedCaller) ResolveKey(string) (enforce.Caller, error) { return f.c, nil }
func (f fixedCaller) Anonymous(netip.Addr) enforce.Caller       { return f.c }
