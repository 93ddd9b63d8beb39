package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	tests := []struct {
		name    string
		jitter  Jitter
		attempt int
		rand    float64
		want    time.Duration
	}{
		{"exponential first retry waits the base", NoJitter, 1, 0.7, 100 * time.Millisecond},
		{"exponential doubles each retry", NoJitter, 3, 0.7, 400 * time.Millisecond},
		{"exponential is capped at max delay", NoJitter, 10, 0.7, time.Second},
		{"exponential survives huge attempt numbers", NoJitter, 500, 0.7, time.Second},
		{"full jitter scales the whole delay", FullJitter, 3, 0.25, 100 * time.Millisecond},
		{"full jitter can be zero", FullJitter, 3, 0, 0},
		{"equal jitter keeps half", EqualJitter, 3, 0, 200 * time.Millisecond},
		{"equal jitter randomises the other half", EqualJitter, 3, 0.5, 300 * time.Millisecond},
		{"equal jitter is capped too", EqualJitter, 20, 0.5, 750 * time.Millisecond},
		{"no backoff never waits", NoBackoff, 4, 0.9, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(Config{Jitter: tt.jitter, BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second,
				Rand: func() float64 { return tt.rand }})
			if got := c.Backoff(tt.attempt); got != tt.want {
				t.Errorf("Backoff(%d) = %v, want %v", tt.attempt, got, tt.want)
			}
		})
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 10, 21, 7, 28, 0, 0, time.UTC)
	tests := []struct {
		name   string
		value  string
		want   time.Duration
		wantOK bool
	}{
		{"seconds", "37", 37 * time.Second, true},
		{"seconds with spaces", " 2 ", 2 * time.Second, true},
		{"zero seconds", "0", 0, true},
		{"http date in the future", "Wed, 21 Oct 2026 07:28:09 GMT", 9 * time.Second, true},
		{"http date in the past gives zero", "Wed, 21 Oct 2026 07:27:00 GMT", 0, true},
		{"empty", "", 0, false},
		{"negative", "-5", 0, false},
		{"fractional", "1.5", 0, false},
		{"garbage", "soon", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ParseRetryAfter(tt.value, now)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v, %v", tt.value, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

// scripted answers each request with the next of its responses and records
// what it received.
type scripted struct {
	t         *testing.T
	responses []scriptedResponse

	mu       sync.Mutex
	auth     []string
	bodies   []string
	requests int
}

type scriptedResponse struct {
	status     int
	retryAfter string
}

func (s *scripted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		s.t.Errorf("read body: %v", err)
	}
	s.mu.Lock()
	i := s.requests
	s.requests++
	s.auth = append(s.auth, r.Header.Get("Authorization"))
	s.bodies = append(s.bodies, string(body))
	s.mu.Unlock()
	resp := scriptedResponse{status: http.StatusOK}
	if i < len(s.responses) {
		resp = s.responses[i]
	}
	if resp.retryAfter != "" {
		w.Header().Set("Retry-After", resp.retryAfter)
	}
	w.WriteHeader(resp.status)
	_, _ = io.WriteString(w, "attempt body")
}

// recordSleep returns a Sleep that records its waits and does not wait.
func recordSleep(waits *[]time.Duration) func(context.Context, time.Duration) error {
	var mu sync.Mutex
	return func(ctx context.Context, d time.Duration) error {
		mu.Lock()
		*waits = append(*waits, d)
		mu.Unlock()
		return ctx.Err()
	}
}

func TestDo(t *testing.T) {
	now := time.Date(2026, 10, 21, 7, 28, 0, 0, time.UTC)
	tests := []struct {
		name         string
		responses    []scriptedResponse
		cfg          Config
		body         string
		wantStatus   int
		wantRequests int
		wantWaits    []time.Duration
	}{
		{
			name:         "success needs no retry",
			wantStatus:   200,
			wantRequests: 1,
		},
		{
			name:         "429 is retried with backoff",
			responses:    []scriptedResponse{{status: 429}, {status: 429}},
			wantStatus:   200,
			wantRequests: 3,
			wantWaits:    []time.Duration{100 * time.Millisecond, 200 * time.Millisecond},
		},
		{
			name:         "503 is retried",
			responses:    []scriptedResponse{{status: 503}},
			wantStatus:   200,
			wantRequests: 2,
			wantWaits:    []time.Duration{100 * time.Millisecond},
		},
		{
			name:         "500 is not retried",
			responses:    []scriptedResponse{{status: 500}},
			wantStatus:   500,
			wantRequests: 1,
		},
		{
			name:         "retry-after seconds is the floor of the wait",
			responses:    []scriptedResponse{{status: 429, retryAfter: "3"}},
			wantStatus:   200,
			wantRequests: 2,
			wantWaits:    []time.Duration{3 * time.Second},
		},
		{
			name:         "retry-after http date is honoured",
			responses:    []scriptedResponse{{status: 503, retryAfter: "Wed, 21 Oct 2026 07:28:02 GMT"}},
			wantStatus:   200,
			wantRequests: 2,
			wantWaits:    []time.Duration{2 * time.Second},
		},
		{
			name:         "jitter is added on top of retry-after",
			responses:    []scriptedResponse{{status: 429, retryAfter: "1"}},
			cfg:          Config{Jitter: FullJitter, Rand: func() float64 { return 0.5 }},
			wantStatus:   200,
			wantRequests: 2,
			wantWaits:    []time.Duration{time.Second + 50*time.Millisecond},
		},
		{
			name:         "ignored retry-after leaves the backoff alone",
			responses:    []scriptedResponse{{status: 429, retryAfter: "3"}},
			cfg:          Config{IgnoreRetryAfter: true},
			wantStatus:   200,
			wantRequests: 2,
			wantWaits:    []time.Duration{100 * time.Millisecond},
		},
		{
			name:         "attempts are capped and the last response returned",
			responses:    []scriptedResponse{{status: 429}, {status: 429}, {status: 429}},
			cfg:          Config{MaxAttempts: 2},
			wantStatus:   429,
			wantRequests: 2,
			wantWaits:    []time.Duration{100 * time.Millisecond},
		},
		{
			name:         "total wait is capped before waiting",
			responses:    []scriptedResponse{{status: 429, retryAfter: "2"}, {status: 429, retryAfter: "2"}},
			cfg:          Config{MaxWait: 3 * time.Second},
			wantStatus:   429,
			wantRequests: 2,
			wantWaits:    []time.Duration{2 * time.Second},
		},
		{
			name:         "body is replayed on every attempt",
			responses:    []scriptedResponse{{status: 429}, {status: 503}},
			body:         `{"report":"weekly"}`,
			wantStatus:   200,
			wantRequests: 3,
			wantWaits:    []time.Duration{100 * time.Millisecond, 200 * time.Millisecond},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := &scripted{t: t, responses: tt.responses}
			ts := httptest.NewServer(srv)
			defer ts.Close()
			var waits []time.Duration
			cfg := tt.cfg
			cfg.Key = "sk_test_secret"
			if cfg.Rand == nil {
				cfg.Jitter = NoJitter // exact waits unless the case is about jitter
			}
			cfg.Sleep = recordSleep(&waits)
			cfg.Now = func() time.Time { return now }
			c := New(cfg)

			method, body := http.MethodGet, io.Reader(nil)
			if tt.body != "" {
				method, body = http.MethodPost, strings.NewReader(tt.body)
			}
			req, err := http.NewRequest(method, ts.URL, body)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatalf("Do: %v", err)
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()

			if resp.StatusCode != tt.wantStatus {
				t.Errorf("status = %d, want %d", resp.StatusCode, tt.wantStatus)
			}
			if string(got) != "attempt body" {
				t.Errorf("returned body = %q, want the last attempt's body", got)
			}
			if srv.requests != tt.wantRequests {
				t.Errorf("requests = %d, want %d", srv.requests, tt.wantRequests)
			}
			if !equalDurations(waits, tt.wantWaits) {
				t.Errorf("waits = %v, want %v", waits, tt.wantWaits)
			}
			for i, a := range srv.auth {
				if a != "Bearer sk_test_secret" {
					t.Errorf("attempt %d Authorization = %q", i+1, a)
				}
			}
			for i, b := range srv.bodies {
				if b != tt.body {
					t.Errorf("attempt %d body = %q, want %q", i+1, b, tt.body)
				}
			}
			if req.Header.Get("Authorization") != "" {
				t.Error("Do modified the caller's request")
			}
		})
	}
}

func equalDurations(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestDoBodyWithoutGetBodyIsSentOnce(t *testing.T) {
	srv := &scripted{t: t, responses: []scriptedResponse{{status: 429}}}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	var waits []time.Duration
	c := New(Config{Sleep: recordSleep(&waits)})
	req, err := http.NewRequest(http.MethodPost, ts.URL, io.NopCloser(strings.NewReader("once")))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if !errors.Is(err, ErrBodyNotReplayable) || resp == nil {
		t.Fatalf("Do = %v, %v; want the 429 with ErrBodyNotReplayable", resp, err)
	}
	resp.Body.Close()
	if resp.StatusCode != 429 || srv.requests != 1 || len(waits) != 0 {
		t.Errorf("status %d after %d requests and waits %v; want the 429 after 1 request and no wait",
			resp.StatusCode, srv.requests, waits)
	}
}

func TestDoContext(t *testing.T) {
	t.Run("cancellation while waiting returns the context error", func(t *testing.T) {
		srv := &scripted{t: t, responses: []scriptedResponse{{status: 429, retryAfter: "3"}}}
		ts := httptest.NewServer(srv)
		defer ts.Close()
		ctx, cancel := context.WithCancel(context.Background())
		c := New(Config{Sleep: func(context.Context, time.Duration) error {
			cancel()
			return context.Canceled
		}})
		_, err := c.Get(ctx, ts.URL)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
		if srv.requests != 1 {
			t.Errorf("requests = %d, want 1", srv.requests)
		}
	})
	t.Run("a wait past the deadline returns the response without waiting", func(t *testing.T) {
		srv := &scripted{t: t, responses: []scriptedResponse{{status: 429, retryAfter: "30"}}}
		ts := httptest.NewServer(srv)
		defer ts.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var waits []time.Duration
		c := New(Config{Sleep: recordSleep(&waits)})
		resp, err := c.Get(ctx, ts.URL)
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != 429 || len(waits) != 0 || srv.requests != 1 {
			t.Errorf("status %d, waits %v, requests %d; want 429, none, 1", resp.StatusCode, waits, srv.requests)
		}
	})
	t.Run("real sleep stops at cancellation", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := sleepCtx(ctx, time.Hour); !errors.Is(err, context.Canceled) {
			t.Errorf("sleepCtx = %v, want context.Canceled", err)
		}
	})
}

func TestPolicyWindow(t *testing.T) {
	tests := []struct {
		name   string
		header string
		limit  int64
		want   time.Duration
	}{
		{"single policy", `"pro-search";q=100;w=60`, 100, time.Minute},
		{"picks the policy with the limit", `"pro-search";q=100;w=60, "pro-global";q=10000;w=3600`, 10000, time.Hour},
		{"no matching quota", `"pro-search";q=100;w=60`, 5, 0},
		{"empty header", "", 100, 0},
		{"malformed parameters are skipped", `"x";q=abc;w=1, "y";q=7;w=2`, 7, 2 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := policyWindow(tt.header, tt.limit); got != tt.want {
				t.Errorf("policyWindow(%q, %d) = %v, want %v", tt.header, tt.limit, got, tt.want)
			}
		})
	}
}
