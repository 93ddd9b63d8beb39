// Package client is an HTTP client for APIs protected by Sluice.
//
// It sends your API key as a bearer token, retries 429 Too Many Requests and
// 503 Service Unavailable with exponential backoff (with full, equal or no
// jitter), honours Retry-After in seconds or as an HTTP date, caps both the
// number of attempts and the total time spent waiting, stops at once when the
// request's context is cancelled, and replays request bodies safely.
//
// With Config.Pace set, the client also paces itself from the
// X-RateLimit-Remaining and X-RateLimit-Reset headers: every goroutine using
// one Client shares one budget, so the client waits for the window to reset
// instead of spending requests on 429s.
//
// One Client is safe for concurrent use and should be shared by every
// goroutine that calls the API with the same key, so that pacing sees all of
// their requests.
package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Jitter chooses how a backoff delay is randomised. Randomising spreads the
// retries of many clients rejected at the same moment, so they do not all
// come back at the same moment and get rejected again.
type Jitter int

const (
	// FullJitter waits a uniformly random time in [0, d), where d is the
	// exponential delay for the attempt. It spreads retries the most and is
	// the default.
	FullJitter Jitter = iota
	// EqualJitter waits d/2 plus a uniformly random time in [0, d/2): a
	// guaranteed minimum wait with half the spread of FullJitter.
	EqualJitter
	// NoJitter waits exactly d: plain exponential backoff.
	NoJitter
	// NoBackoff retries immediately (after Retry-After, if honoured). It exists
	// to measure what backoff buys; do not use it against a real API.
	NoBackoff
)

// String returns the name used in docs and benchmark output.
func (j Jitter) String() string {
	switch j {
	case FullJitter:
		return "full-jitter"
	case EqualJitter:
		return "equal-jitter"
	case NoJitter:
		return "exponential"
	case NoBackoff:
		return "no-backoff"
	}
	return "jitter(" + strconv.Itoa(int(j)) + ")"
}

// Defaults applied to zero Config fields.
const (
	DefaultMaxAttempts = 5
	DefaultBaseDelay   = 100 * time.Millisecond
	DefaultMaxDelay    = 10 * time.Second
	DefaultMaxWait     = 30 * time.Second
)

// Config configures a Client. The zero value of every field except Key is a
// sensible default.
type Config struct {
	// Key is the API key secret, sent as "Authorization: Bearer <Key>". Leave
	// it empty to call anonymously (limited by your IP address).
	Key string
	// HTTPClient sends the requests; nil means a client with a 30-second
	// timeout per attempt. Its Transport is used as is.
	HTTPClient *http.Client
	// MaxAttempts caps the attempts per call, the first one included
	// (0 means DefaultMaxAttempts; 1 disables retries).
	MaxAttempts int
	// BaseDelay is the backoff before the first retry; each further retry
	// doubles it (0 means DefaultBaseDelay).
	BaseDelay time.Duration
	// MaxDelay caps one backoff delay before jitter (0 means DefaultMaxDelay).
	MaxDelay time.Duration
	// MaxWait caps the total time one call spends waiting between attempts
	// (0 means DefaultMaxWait). When the next wait would pass it, Do returns
	// the last response instead of waiting.
	MaxWait time.Duration
	// Jitter chooses how backoff delays are randomised (zero: FullJitter).
	Jitter Jitter
	// IgnoreRetryAfter makes the client use its backoff alone even when the
	// server says when to come back. Leave it false: Retry-After is the
	// earliest moment a retry can succeed. It exists for measurements.
	IgnoreRetryAfter bool
	// Pace makes the client wait for the rate-limit window to reset when the
	// X-RateLimit-Remaining budget, shared by every goroutine using this
	// Client, is spent, so that it rarely receives a 429.
	Pace bool

	// Rand returns a uniformly random number in [0, 1) and must be safe for
	// concurrent use; nil means math/rand/v2. Tests inject it for determinism.
	Rand func() float64
	// Sleep waits for d or until ctx is done, returning ctx.Err() in the
	// latter case; nil means a timer. Tests inject it to record or skip waits.
	Sleep func(ctx context.Context, d time.Duration) error
	// Now returns the current time; nil means time.Now. Pacing compares it
	// with X-RateLimit-Reset, so it must be wall-clock time.
	Now func() time.Time
}

// Client calls an API protected by Sluice. Create it with New.
type Client struct {
	key         string
	http        *http.Client
	maxAttempts int
	base        time.Duration
	maxDelay    time.Duration
	maxWait     time.Duration
	jitter      Jitter
	retryAfter  bool
	rand        func() float64
	sleep       func(context.Context, time.Duration) error
	now         func() time.Time
	pacer       *pacer // nil unless Config.Pace
}

// New returns a Client for cfg, filling zero fields with the defaults.
func New(cfg Config) *Client {
	c := &Client{
		key:         cfg.Key,
		http:        cfg.HTTPClient,
		maxAttempts: cfg.MaxAttempts,
		base:        cfg.BaseDelay,
		maxDelay:    cfg.MaxDelay,
		maxWait:     cfg.MaxWait,
		jitter:      cfg.Jitter,
		retryAfter:  !cfg.IgnoreRetryAfter,
		rand:        cfg.Rand,
		sleep:       cfg.Sleep,
		now:         cfg.Now,
	}
	if c.http == nil {
		c.http = &http.Client{Timeout: 30 * time.Second}
	}
	if c.maxAttempts <= 0 {
		c.maxAttempts = DefaultMaxAttempts
	}
	if c.base <= 0 {
		c.base = DefaultBaseDelay
	}
	if c.maxDelay <= 0 {
		c.maxDelay = DefaultMaxDelay
	}
	if c.maxWait <= 0 {
		c.maxWait = DefaultMaxWait
	}
	if c.rand == nil {
		c.rand = rand.Float64
	}
	if c.sleep == nil {
		c.sleep = sleepCtx
	}
	if c.now == nil {
		c.now = time.Now
	}
	if cfg.Pace {
		c.pacer = newPacer(c.now, c.sleep)
	}
	return c
}

// ErrBodyNotReplayable is returned by Do, together with the 429 or 503
// response, when a request with a body should be retried but cannot be
// replayed because its GetBody is nil: the body was sent once. http.NewRequest
// sets GetBody for *bytes.Buffer, *bytes.Reader and *strings.Reader bodies.
var ErrBodyNotReplayable = errors.New("client: request body cannot be replayed: set Request.GetBody")

// Get issues a GET to url with the request's context ctx.
func (c *Client) Get(ctx context.Context, url string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("client: build request: %w", err)
	}
	return c.Do(req)
}

// Do sends req, retrying 429 and 503 responses as configured.
//
// Like http.Client.Do, Do returns a non-nil error only when no response could
// be had (a transport failure, a cancelled context); when retries run out it
// returns the last 429 or 503 response with a nil error, so check the status
// code. The one exception, as with http.Client's CheckRedirect, is a body that
// cannot be replayed: the 429 or 503 comes back with ErrBodyNotReplayable, so
// the caller learns why it was not retried. The caller must close the returned body. req is not modified; each
// attempt sends a clone with the Authorization header set (an Authorization
// header already on req is kept).
func (c *Client) Do(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	var waited time.Duration
	for attempt := 1; ; attempt++ {
		try, err := c.prepare(req, attempt)
		if err != nil {
			return nil, err
		}
		var t ticket
		if c.pacer != nil {
			if t, err = c.pacer.wait(ctx); err != nil {
				return nil, err
			}
		}
		resp, err := c.http.Do(try)
		if c.pacer != nil {
			c.pacer.observe(t, resp)
		}
		if err != nil {
			return nil, err
		}
		if !retryable(resp.StatusCode) || attempt >= c.maxAttempts {
			return resp, nil
		}
		if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
			// The body is spent; a retry would send it empty.
			return resp, ErrBodyNotReplayable
		}
		delay := c.delay(attempt, resp)
		if waited+delay > c.maxWait || pastDeadline(ctx, c.now().Add(delay)) {
			return resp, nil
		}
		drain(resp)
		if err := c.sleep(ctx, delay); err != nil {
			return nil, fmt.Errorf("client: waiting to retry: %w", err)
		}
		waited += delay
	}
}

// prepare clones req for one attempt, with a fresh body and the key.
func (c *Client) prepare(req *http.Request, attempt int) (*http.Request, error) {
	try := req.Clone(req.Context())
	if attempt > 1 && req.Body != nil && req.Body != http.NoBody {
		if req.GetBody == nil {
			return nil, ErrBodyNotReplayable
		}
		body, err := req.GetBody()
		if err != nil {
			return nil, fmt.Errorf("client: replay request body: %w", err)
		}
		try.Body = body
	}
	if c.key != "" && try.Header.Get("Authorization") == "" {
		try.Header.Set("Authorization", "Bearer "+c.key)
	}
	return try, nil
}

// delay is how long to wait before attempt+1, after resp rejected attempt.
// Retry-After, when honoured, is the floor: a retry before it cannot succeed.
// The jittered backoff is added on top of it so that clients told the same
// Retry-After do not all return in the same instant.
func (c *Client) delay(attempt int, resp *http.Response) time.Duration {
	d := c.Backoff(attempt)
	if c.retryAfter {
		if ra, ok := ParseRetryAfter(resp.Header.Get("Retry-After"), c.now()); ok {
			if c.jitter == NoJitter {
				// Plain exponential backoff has no spread to add; wait for
				// whichever is later.
				return max(ra, d)
			}
			return ra + d
		}
	}
	return d
}

// Backoff is the jittered delay before retry number attempt (1 for the first
// retry): BaseDelay doubled attempt-1 times, capped at MaxDelay, then
// randomised by the Client's Jitter. Retry-After is not included.
func (c *Client) Backoff(attempt int) time.Duration {
	if c.jitter == NoBackoff {
		return 0
	}
	d := c.maxDelay
	if shift := attempt - 1; shift < 62 {
		if exp := c.base * time.Duration(math.Pow(2, float64(shift))); exp > 0 && exp < c.maxDelay {
			d = exp
		}
	}
	switch c.jitter {
	case FullJitter:
		return time.Duration(c.rand() * float64(d))
	case EqualJitter:
		return d/2 + time.Duration(c.rand()*float64(d/2))
	}
	return d
}

func retryable(status int) bool {
	return status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable
}

func pastDeadline(ctx context.Context, t time.Time) bool {
	deadline, ok := ctx.Deadline()
	return ok && t.After(deadline)
}

// drain reads a little of a response we are discarding so that its
// connection can be reused, then closes it.
func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// ParseRetryAfter reads a Retry-After header value, either delay-seconds
// ("37") or an HTTP date ("Wed, 21 Oct 2026 07:28:00 GMT", measured from now).
// ok is false for an empty or malformed value. A date in the past gives 0.
func ParseRetryAfter(v string, now time.Time) (d time.Duration, ok bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs < 0 {
			return 0, false
		}
		if secs > int64(math.MaxInt64/time.Second) {
			secs = int64(math.MaxInt64 / time.Second)
		}
		return time.Duration(secs) * time.Second, true
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(at.Sub(now), 0), true
}
