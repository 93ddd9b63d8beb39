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
// -Remaining and -Reset, and the window from RateLimit-Policy) and spends one
// unit per request it lets through. Responses can be stale (requests still in
// flight when the server answered are not counted in Remaining), so within one
// window it only ever lowers the budget.
//
// When the budget is spent it waits for the window to end, then sends one
// probe request alone; the others wait for its answer. A probe answered from
// a new window (a later Reset) brings the new budget, exact because nothing
// else was in flight. A probe answered from the old window means the window
// has not ended yet: the next probe goes a little later. Probing matters
// because X-RateLimit-Reset is whole seconds, rounded up: the window really
// ends up to a second earlier, which for a one-second window is half the
// throughput. The pacer therefore starts probing a "lead" before the reported
// reset (at most a second, at most a window) and learns the lead from the
// probes that came too early, so that after a window or two the first probe
// usually lands just after the window ends.
//
// Until the first response arrives only one request (the first probe) goes
// out, so goroutines starting together do not overshoot a limit the client
// has not learned yet.
type pacer struct {
	now   func() time.Time
	sleep func(context.Context, time.Duration) error

	mu        sync.Mutex
	unpaced   bool          // the server sends no rate-limit headers: nothing to pace by
	known     bool          // a budget has been learned
	limit     int64         // X-RateLimit-Limit of the binding layer
	remaining int64         // budget left in the current window, after our in-flight requests
	reset     time.Time     // X-RateLimit-Reset of the current window
	window    time.Duration // the binding layer's window
	lead      time.Duration // how long before reset the window really ends, as learned
	probing   bool          // a probe is in flight
	probeDone chan struct{} // closed when the in-flight probe is answered
	nextProbe time.Time     // earliest time for the next probe after one came too early
	early     time.Time     // send time of the latest probe answered from the old window
}

func newPacer(now func() time.Time, sleep func(context.Context, time.Duration) error) *pacer {
	return &pacer{now: now, sleep: sleep, lead: time.Second}
}

// ticket is one request's permission to go, to be handed back to observe.
type ticket struct {
	probe bool
	sent  time.Time
}

// wait blocks until the shared budget allows one more request, and spends it.
func (p *pacer) wait(ctx context.Context) (ticket, error) {
	for {
		t, d, probeDone := p.reserve()
		switch {
		case probeDone != nil:
			select {
			case <-probeDone:
			case <-ctx.Done():
				return ticket{}, fmt.Errorf("client: waiting for the rate-limit budget: %w", ctx.Err())
			}
		case d > 0:
			if err := p.sleep(ctx, d); err != nil {
				return ticket{}, fmt.Errorf("client: waiting for the rate-limit window to reset: %w", err)
			}
		default:
			return t, nil
		}
	}
}

// reserve either lets a request go (spending budget, or as the probe), or
// says how long to wait, or returns the channel of the probe to wait for.
func (p *pacer) reserve() (ticket, time.Duration, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	if p.unpaced {
		return ticket{sent: now}, 0, nil
	}
	if p.known && p.remaining > 0 {
		p.remaining--
		return ticket{sent: now}, 0, nil
	}
	if p.probing {
		return ticket{}, 0, p.probeDone
	}
	if p.known {
		start := p.reset.Add(-p.lead)
		if p.nextProbe.After(start) {
			start = p.nextProbe
		}
		if now.Before(start) {
			return ticket{}, start.Sub(now), nil
		}
	}
	p.probing = true
	p.probeDone = make(chan struct{})
	return ticket{probe: true, sent: now}, 0, nil
}

// observe updates the budget from the response to a request let through by
// t; resp is nil after a transport error.
func (p *pacer) observe(t ticket, resp *http.Response) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if t.probe {
		defer func() {
			p.probing = false
			close(p.probeDone)
		}()
	}
	if resp == nil || p.unpaced {
		return
	}
	h := resp.Header
	limit, err1 := strconv.ParseInt(h.Get("X-RateLimit-Limit"), 10, 64)
	remaining, err2 := strconv.ParseInt(h.Get("X-RateLimit-Remaining"), 10, 64)
	resetUnix, err3 := strconv.ParseInt(h.Get("X-RateLimit-Reset"), 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || limit <= 0 {
		if !p.known && t.probe {
			p.unpaced = true
		}
		return
	}
	if resp.StatusCode == http.StatusTooManyRequests {
		remaining = 0
	}
	reset := time.Unix(resetUnix, 0)
	switch {
	case !p.known || reset.After(p.reset):
		if p.known && !p.early.IsZero() {
			// The window ended after the last early probe went out: start
			// the next window's probing half a probe interval after that
			// point, relative to its reset.
			p.lead = min(max(p.reset.Sub(p.early)-p.probeInterval()/2, 0), time.Second, p.window)
		}
		p.known = true
		p.limit = limit
		p.remaining = remaining
		p.reset = reset
		p.early = time.Time{}
		if w := policyWindow(h.Get("RateLimit-Policy"), limit); w > 0 {
			p.window = w
		} else if p.window == 0 {
			p.window = time.Second
		}
		p.lead = min(p.lead, p.window)
	case reset.Equal(p.reset):
		p.remaining = min(p.remaining, remaining)
		if t.probe {
			p.early = t.sent
			// The window ends by the reported reset at the latest, so a
			// long probe interval (a long window) never waits past it.
			now := p.now()
			p.nextProbe = now.Add(p.probeInterval())
			if now.Before(p.reset) && p.reset.Before(p.nextProbe) {
				p.nextProbe = p.reset
			}
		}
	}
}

// probeInterval spaces probes that find the window not yet over: the time
// the limit allows per request, at least a millisecond.
func (p *pacer) probeInterval() time.Duration {
	if p.limit <= 0 {
		return time.Millisecond
	}
	return max(p.window/time.Duration(p.limit), time.Millisecond)
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
