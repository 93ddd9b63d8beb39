// Package tokenlimit rate limits the portal's token-authenticated doors
// (the admin API, the policy feed) with Sluice's own engine, per client
// address: a budget of requests, and a much smaller one of failed
// authentications, so that a script trying tokens gets a few answers a
// minute and then 429s, instead of hundreds a second.
package tokenlimit

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
)

// Defaults for Options.
const (
	DefaultFailures = 20
	DefaultRequests = 1200
)

// Options configure a Limiter.
type Options struct {
	// Store decides: the engine's store, shared by every instance.
	Store enforce.Store
	// Fallback, when set, decides while Store fails (this instance's
	// memory); with neither answering, requests are let through to the
	// door's own authentication, and the failure is logged.
	Fallback enforce.Store
	// ClientAddr names the client of a request (trusted proxies applied).
	ClientAddr func(*http.Request) netip.Addr
	// Blocks group addresses (an IPv6 /64 by default) so that one client
	// cannot rotate addresses inside its block.
	Blocks enforce.AddressPrefixes
	// Failures is how many failed authentications (answers 401) one
	// address block may have per minute at one door; Requests how many
	// requests. Zero means DefaultFailures and DefaultRequests.
	Failures, Requests int64
	Logger             *slog.Logger
}

// Limiter wraps doors in the limits of its Options.
type Limiter struct {
	opts Options
	log  *slog.Logger
}

// New returns a Limiter. Store and ClientAddr are required.
func New(opts Options) *Limiter {
	if opts.Store == nil || opts.ClientAddr == nil {
		panic("tokenlimit.New: Store and ClientAddr are required")
	}
	if opts.Failures <= 0 {
		opts.Failures = DefaultFailures
	}
	if opts.Requests <= 0 {
		opts.Requests = DefaultRequests
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Limiter{opts: opts, log: log}
}

// perMinute is a token bucket holding n a minute, refilled evenly.
func perMinute(name string, n int64) enforce.Limit {
	return enforce.Limit{Name: name, Algorithm: enforce.TokenBucket, Limit: n, Burst: n, Window: time.Minute,
		Cost: 1, Mode: enforce.ModeReject}
}

// Wrap limits the door named door (e.g. "admin-api"; each door has budgets
// of its own) in front of next:
//
//   - an address whose failed authentications are spent gets 429 without
//     reaching next, until the bucket refills;
//   - every request spends one of the address's requests, and gets 429
//     when they are spent;
//   - an answer 401 from next spends one failed authentication.
//
// Requests are counted exactly. Failures are checked before next runs and
// spent after it answers, so requests in flight at the moment the budget
// runs out may each add one failure beyond it.
func (l *Limiter) Wrap(door string, next http.Handler) http.Handler {
	failures := []enforce.Limit{perMinute(door+"-auth-failures", l.opts.Failures)}
	requests := []enforce.Limit{perMinute(door+"-requests", l.opts.Requests)}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		subject := "door:" + door + ":" + l.opts.Blocks.Subject(l.opts.ClientAddr(r))
		ask := func(peek bool, ls []enforce.Limit) (time.Duration, bool) {
			return l.decide(r.Context(), peek, enforce.Request{Subject: subject, Route: door, Limits: ls})
		}
		if wait, ok := ask(true, failures); !ok {
			tooMany(w, wait, "Too many failed authentications from your address.")
			return
		}
		if wait, ok := ask(false, requests); !ok {
			tooMany(w, wait, "Too many requests from your address.")
			return
		}
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		if sw.status == http.StatusUnauthorized {
			ask(false, failures)
		}
	})
}

// decide peeks at or spends req's limits and says whether the request may
// go on, and if not, after how long.
func (l *Limiter) decide(ctx context.Context, peek bool, req enforce.Request) (time.Duration, bool) {
	d, err := l.call(ctx, l.opts.Store, peek, req)
	if err != nil && l.opts.Fallback != nil && ctx.Err() == nil {
		l.log.Warn("token door limit: shared store failed, counting locally", "door", req.Route, "err", err)
		d, err = l.call(ctx, l.opts.Fallback, peek, req)
	}
	if err != nil {
		l.log.Warn("token door limit: cannot count; letting the door authenticate", "door", req.Route, "err", err)
		return 0, true
	}
	if d.Allowed {
		return 0, true
	}
	return d.Binding().RetryAfter, false
}

func (l *Limiter) call(ctx context.Context, s enforce.Store, peek bool, req enforce.Request) (enforce.Decision, error) {
	if peek {
		return s.Peek(ctx, req)
	}
	return s.Allow(ctx, req)
}

// tooMany answers 429 as an RFC 9457 problem with Retry-After in whole
// seconds, at least one.
func tooMany(w http.ResponseWriter, wait time.Duration, detail string) {
	secs := max(int64((wait+time.Second-1)/time.Second), 1)
	body, _ := json.Marshal(struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}{"about:blank", "Too Many Requests", http.StatusTooManyRequests,
		detail + " Retry in " + strconv.FormatInt(secs, 10) + " s."})
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Retry-After", strconv.FormatInt(secs, 10))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = w.Write(body)
}

// statusWriter remembers the status of the answer passing through it.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(status int) {
	if s.status == 0 {
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

// Unwrap lets http.ResponseController reach the connection's writer.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }
