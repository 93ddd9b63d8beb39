package client

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// pacer shares one rate-limit budget among every goroutine using a Client.
//
// It learns the budget from the headers of each response (X-RateLimit-Limit,
// -Remaining, -Reset, and the window from RateLimit-Policy), spends one unit
// per request it lets through, and when the budget is spent makes callers wait
// until the reported reset. Responses can be stale (requests still in flight
// when the server answered are not counted in Remaining), so within one window
// it only ever lowers the budget.
//
// Until the first response arrives only one request (the probe) goes out, so
// a burst of goroutines starting together does not overshoot a limit the
// client has not learned yet.
type pacer struct {
	now   func() time.Time
	sleep func(context.Context, time.Duration) error

	mu        sync.Mutex
	probing   bool          // a probe request is in flight
	learned   chan struct{} // closed by the first observed response
	known     bool          // the server sends rate-limit headers
	limit     int64         // X-RateLimit-Limit of the most restrictive layer
	remaining int64         // budget left in the current window, after our in-flight requests
	reset     time.Time     // when the current window ends
	window    time.Duration // the layer's window, to predict the next reset
}

func newPacer(now func() time.Time, sleep func(context.Context, time.Duration) error) *pacer {
	return &pacer{now: now, sleep: sleep, learned: make(chan struct{})}
}

// wait blocks until the shared budget allows one more request, and spends it.
func (p *pacer) wait(ctx context.Context) error {
	for {
		d, learning := p.reserve()
		if learning != nil {
			select {
			case <-learning:
				continue
			case <-ctx.Done():
				return fmt.Errorf("client: waiting for the rate-limit budget: %w", ctx.Err())
			}
		}
		if d <= 0 {
			return nil
		}
		if err := p.sleep(ctx, d); err != nil {
			return fmt.Errorf("client: waiting for the rate-limit window to reset: %w", err)
		}
	}
}

// reserve spends one unit of budget and returns 0, or returns how long to
// wait before asking again, or a channel to wait on while the probe learns
// the budget.
func (p *pacer) reserve() (time.Duration, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.learned:
	default:
		if p.probing {
			return 0, p.learned
		}
		p.probing = true
		return 0, nil
	}
	if !p.known {
		return 0, nil // the server sends no rate-limit headers: nothing to pace by
	}
	now := p.now()
	if !now.Before(p.reset) {
		// The window the budget belonged to is over: assume a full one until
		// a response says otherwise.
		p.remaining = p.limit
		p.reset = p.reset.Add(p.window)
		if !p.reset.After(now) {
			p.reset = now.Add(p.window)
		}
	}
	if p.remaining > 0 {
		p.remaining--
		return 0, nil
	}
	return p.reset.Sub(now), nil
}

// observe updates the budget from a response; resp may be nil (a transport
// error), which only ends the probe.
func (p *pacer) observe(resp *http.Response) {
	p.mu.Lock()
	defer p.mu.Unlock()
	defer func() {
		select {
		case <-p.learned:
		default:
			close(p.learned)
		}
	}()
	if resp == nil {
		return
	}
	h := resp.Header
	limit, err1 := strconv.ParseInt(h.Get("X-RateLimit-Limit"), 10, 64)
	remaining, err2 := strconv.ParseInt(h.Get("X-RateLimit-Remaining"), 10, 64)
	resetUnix, err3 := strconv.ParseInt(h.Get("X-RateLimit-Reset"), 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || limit <= 0 {
		return
	}
	reset := time.Unix(resetUnix, 0)
	if ra, ok := ParseRetryAfter(h.Get("Retry-After"), p.now()); ok && resp.StatusCode == http.StatusTooManyRequests {
		// A rejected request: nothing is available until Retry-After, which
		// can be later than the most restrictive layer's reset.
		remaining = 0
		if at := p.now().Add(ra); at.After(reset) {
			reset = at
		}
	}
	window := policyWindow(h.Get("RateLimit-Policy"), limit)
	switch {
	case !p.known || reset.After(p.reset):
		// A newer window than the one we are counting.
		p.known = true
		p.limit = limit
		p.remaining = remaining
		p.reset = reset
	case reset.Equal(p.reset):
		p.remaining = min(p.remaining, remaining)
	}
	if window > 0 {
		p.window = window
	} else if p.window == 0 {
		p.window = time.Second
	}
}

// policyWindow finds the window of the policy whose quota is limit in a
// RateLimit-Policy header such as `"pro-search";q=100;w=60, "pro";q=1000;w=3600`.
// It returns 0 when none matches.
func policyWindow(header string, limit int64) time.Duration {
	for _, item := range strings.Split(header, ",") {
		var q, w int64 = -1, -1
		for _, param := range strings.Split(item, ";")[1:] {
			k, v, ok := strings.Cut(strings.TrimSpace(param), "=")
			if !ok {
				continue
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				continue
			}
			switch k {
			case "q":
				q = n
			case "w":
				w = n
			}
		}
		if q == limit && w > 0 {
			return time.Duration(w) * time.Second
		}
	}
	return 0
}
