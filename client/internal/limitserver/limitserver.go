// Package limitserver is a test server for the client package: one endpoint
// behind a rate limit that answers the way Sluice's middleware does (the
// X-RateLimit-* and RateLimit-Policy headers on every response; 429 with
// Retry-After and a JSON body when over the limit), and that records every
// admitted request so tests can check the limit held.
package limitserver

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Server enforces Limit requests per Window on every request, whoever sends
// it (one shared key), with a fixed window aligned to the Unix epoch.
type Server struct {
	limit  int64
	window time.Duration

	mu       sync.Mutex
	admitted map[int64]int64 // window index -> admitted requests
	rejected int64
	times    []time.Time // arrival time of every request, in order
}

// New returns a Server admitting limit requests per window.
func New(limit int64, window time.Duration) *Server {
	return &Server{limit: limit, window: window, admitted: map[int64]int64{}}
}

// ServeHTTP admits or rejects one request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	idx := now.UnixNano() / int64(s.window)
	end := time.Unix(0, (idx+1)*int64(s.window))

	s.mu.Lock()
	s.times = append(s.times, now)
	used := s.admitted[idx]
	ok := used < s.limit
	if ok {
		used++
		s.admitted[idx] = used
	} else {
		s.rejected++
	}
	s.mu.Unlock()

	resetSecs := end.Unix()
	if end.After(time.Unix(resetSecs, 0)) {
		resetSecs++
	}
	untilReset := end.Sub(now)
	h := w.Header()
	h.Set("X-RateLimit-Limit", strconv.FormatInt(s.limit, 10))
	h.Set("X-RateLimit-Remaining", strconv.FormatInt(s.limit-used, 10))
	h.Set("X-RateLimit-Reset", strconv.FormatInt(resetSecs, 10))
	h.Set("RateLimit-Policy", fmt.Sprintf(`"test";q=%d;w=%d`, s.limit, int64(s.window/time.Second)))
	h.Set("RateLimit", fmt.Sprintf(`"test";r=%d;t=%d`, s.limit-used, ceilSeconds(untilReset)))
	if !ok {
		retry := ceilSeconds(untilReset)
		h.Set("Retry-After", strconv.FormatInt(retry, 10))
		h.Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprintf(w, `{"error":"rate_limit_exceeded","message":"over the limit","retry_after":%d,"limit":%d,"policy":"test"}`, retry, s.limit)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprint(w, `{"ok":true}`)
}

// Stats is what a Server saw.
type Stats struct {
	// MaxPerWindow is the most requests admitted in any one window.
	MaxPerWindow int64
	// Admitted and Rejected count every request.
	Admitted, Rejected int64
	// Arrivals holds the arrival time of every request, in order.
	Arrivals []time.Time
}

// Stats returns what the server saw so far.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{Rejected: s.rejected, Arrivals: append([]time.Time(nil), s.times...)}
	for _, n := range s.admitted {
		st.Admitted += n
		st.MaxPerWindow = max(st.MaxPerWindow, n)
	}
	return st
}

func ceilSeconds(d time.Duration) int64 {
	s := int64((d + time.Second - 1) / time.Second)
	return max(s, 1)
}
