// Package limitserver is a test server for the client package: endpoints
// behind Sluice's real enforcement middleware (internal/enforce) with one
// plan-wide limit on every caller, recording every request so tests can check
// that the limit held and how retries arrived.
package limitserver

import (
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/httplimit"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
)

// Server admits Limit requests per Window from every caller, whoever it is
// (all callers share one subject, as goroutines sharing one key do), through
// enforce.Middleware over the given store. Any path answers 200 {"ok":true}
// when admitted.
type Server struct {
	limit enforce.Limit
	h     http.Handler

	mu       sync.Mutex
	admitted []admission
	rejected int64
	arrivals []time.Time
}

// admission is one request the middleware let through, with the window it
// was counted in as the middleware reported it.
type admission struct {
	at               time.Time
	reset, remaining string
}

// New returns a Server admitting limit requests per window under a fixed
// window, decided by an in-memory store.
func New(limit int64, window time.Duration) *Server {
	return NewWithStore(memstore.New(memstore.Options{}), limit, window)
}

// NewWithStore is New deciding with store (a Redis store, say).
func NewWithStore(store enforce.Store, limit int64, window time.Duration) *Server {
	s := &Server{
		limit: enforce.Limit{Name: "test", Algorithm: enforce.FixedWindow, Limit: limit, Window: window},
	}
	mw := httplimit.NewMiddleware(store, oneCaller{s.limit}, httplimit.Options{})
	mux := http.NewServeMux()
	mux.Handle("/", mw.Wrap(http.HandlerFunc(s.serveAdmitted)))
	s.h = mux
	return s
}

// ServeHTTP records the request and passes it through the middleware.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20))
	s.mu.Lock()
	s.arrivals = append(s.arrivals, time.Now())
	s.mu.Unlock()
	rec := &statusRecorder{ResponseWriter: w}
	s.h.ServeHTTP(rec, r)
	if rec.status == http.StatusTooManyRequests {
		s.mu.Lock()
		s.rejected++
		s.mu.Unlock()
	}
}

func (s *Server) serveAdmitted(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	s.mu.Lock()
	s.admitted = append(s.admitted, admission{at: time.Now(), reset: h.Get("X-RateLimit-Reset"), remaining: h.Get("X-RateLimit-Remaining")})
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprint(w, `{"ok":true}`)
}

// Stats is what a Server saw.
type Stats struct {
	// MaxPerWindow is the most requests admitted in any one window. The
	// window of a request is the one the middleware counted it in, named by
	// the X-RateLimit-Reset it answered (a fixed window's end), not the
	// handler's clock, which can see a request decided at the very end of
	// one window arrive in the next.
	MaxPerWindow int64
	// Duplicates counts admitted requests that reported the same
	// X-RateLimit-Remaining as another in their window: each admission must
	// leave a different remainder, so any duplicate is an over-admission.
	Duplicates int64
	// Admitted and Rejected count requests that reached the handler and
	// requests answered 429.
	Admitted, Rejected int64
	// Arrivals holds the arrival time of every request, in order.
	Arrivals []time.Time
}

// Stats returns what the server saw so far.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{
		Admitted: int64(len(s.admitted)),
		Rejected: s.rejected,
		Arrivals: append([]time.Time(nil), s.arrivals...),
	}
	perWindow := map[string]map[string]bool{}
	for _, a := range s.admitted {
		w := perWindow[a.reset]
		if w == nil {
			w = map[string]bool{}
			perWindow[a.reset] = w
		}
		if w[a.remaining] {
			st.Duplicates++
		}
		w[a.remaining] = true
		st.MaxPerWindow = max(st.MaxPerWindow, int64(len(w)))
	}
	return st
}

// oneCaller resolves every key, and every anonymous caller, to one subject
// under one limit.
type oneCaller struct{ limit enforce.Limit }

func (c oneCaller) ResolveKey(string) (enforce.Caller, error) {
	return enforce.Caller{Subject: "key:1", KeyID: 1, UserID: 1, Plan: "test", Limits: []enforce.Limit{c.limit}}, nil
}

func (c oneCaller) Anonymous(netip.Addr) enforce.Caller {
	return enforce.Caller{Subject: "key:1", Plan: "test", Limits: []enforce.Limit{c.limit}}
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}
