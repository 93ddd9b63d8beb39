package guard_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/guard"
)

// TestGuardFailureModesAgreeWithThePortal sends requests through a guard
// whose Redis refuses every connection, in each failure mode, and expects
// what the portal gives with PORTAL_REDIS_FAILURE_MODE set the same way:
// local (the default for both) decides each instance's share on its own
// memory, marked local; open admits everything, marked store-unavailable;
// closed answers 503 with Retry-After.
func TestGuardFailureModesAgreeWithThePortal(t *testing.T) {
	p := newPortal(t) // the plan allows 3 per hour on GET /items/{id}
	dead := redis.NewClient(&redis.Options{Addr: freeAddr(t), MaxRetries: -1})
	t.Cleanup(func() { _ = dead.Close() })
	const sent = 5
	for _, tc := range []struct {
		name       string
		mode       guard.FailureMode
		instances  int
		admitted   int
		status     int // of the requests not admitted
		marker     string
		retryAfter bool
	}{
		{name: "DefaultIsLocal", admitted: 3, status: http.StatusTooManyRequests, marker: "local", retryAfter: true},
		{name: "LocalShare", mode: guard.FailLocal, instances: 3, admitted: 1, status: http.StatusTooManyRequests, marker: "local", retryAfter: true},
		{name: "Open", mode: guard.FailOpen, admitted: sent, marker: "store-unavailable"},
		{name: "Closed", mode: guard.FailClosed, admitted: 0, status: http.StatusServiceUnavailable, retryAfter: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := guard.New(context.Background(), guard.Options{PortalURL: p.url, Token: p.token,
				Redis: dead, RedisPrefix: "guard-outage:", FailureMode: tc.mode, Instances: tc.instances})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(g.Close)
			mux := http.NewServeMux()
			mux.Handle("GET /items/{id}", g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
			admitted := 0
			for i := range sent {
				r := httptest.NewRequest("GET", "/items/1", nil)
				r.Header.Set("Authorization", "Bearer "+p.secret)
				w := httptest.NewRecorder()
				mux.ServeHTTP(w, r)
				if w.Code == http.StatusOK {
					admitted++
				} else if w.Code != tc.status {
					t.Errorf("request %d: status %d, want 200 or %d (%s)", i, w.Code, tc.status, w.Body)
				} else if tc.retryAfter && w.Header().Get("Retry-After") == "" {
					t.Errorf("request %d: %d without Retry-After", i, w.Code)
				}
				if got := w.Header().Get("Sluice-RateLimit-Degraded"); w.Code != http.StatusServiceUnavailable && got != tc.marker {
					t.Errorf("request %d: Sluice-RateLimit-Degraded %q, want %q", i, got, tc.marker)
				}
			}
			if admitted != tc.admitted {
				t.Errorf("admitted %d of %d, want exactly %d", admitted, sent, tc.admitted)
			}
		})
	}
	if _, err := guard.New(context.Background(), guard.Options{PortalURL: p.url, Token: p.token, FailureMode: "sometimes"}); err == nil {
		t.Error("guard.New accepted the failure mode \"sometimes\"")
	}
}

// TestGuardLogsLosingAndRegainingThePortal takes the portal away from a
// running guard and brings it back: the guard says so once each way, not
// once per failed poll.
func TestGuardLogsLosingAndRegainingThePortal(t *testing.T) {
	p := newPortal(t)
	target, err := url.Parse(p.url)
	if err != nil {
		t.Fatal(err)
	}
	var down atomic.Bool
	var refused atomic.Int64
	proxy := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			refused.Add(1)
			http.Error(w, "portal unavailable", http.StatusServiceUnavailable)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)

	logs := &syncBuffer{}
	g, err := guard.New(context.Background(), guard.Options{PortalURL: front.URL, Token: p.token, Wait: time.Second,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)

	down.Store(true)
	waitUntil(t, "three refused polls", func() bool { return refused.Load() >= 3 })
	if n := logs.count("lost the portal"); n != 1 {
		t.Errorf("%d polls refused, %d 'lost the portal' lines, want 1:\n%s", refused.Load(), n, logs)
	}
	if n := logs.count("still does not answer"); n < 2 {
		t.Errorf("%d 'still does not answer' debug lines, want one per later refusal:\n%s", n, logs)
	}
	down.Store(false)
	waitUntil(t, "the guard to reach the portal again", func() bool { return logs.count("reached the portal again") > 0 })
	// A few more polls succeed without another line.
	polled := refused.Load()
	time.Sleep(1500 * time.Millisecond)
	if n := logs.count("reached the portal again"); n != 1 || logs.count("lost the portal") != 1 || refused.Load() != polled {
		t.Errorf("after recovery: %d 'reached' and %d 'lost' lines, want 1 each:\n%s", n, logs.count("lost the portal"), logs)
	}
	if strings.Contains(logs.String(), p.token) {
		t.Error("the log holds the service token")
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 30 s for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// syncBuffer is a log destination the guard's goroutine writes while the
// test reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *syncBuffer) count(s string) int { return strings.Count(b.String(), s) }
