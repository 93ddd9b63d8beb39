package tokenlimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/tokenlimit"
)

// clock is a settable time for the memory store.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// door answers 204 to "Bearer good" and 401 to anything else, counting
// the requests it sees.
type door struct {
	mu   sync.Mutex
	seen int
}

func (d *door) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	d.seen++
	d.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer good" {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (d *door) count() int { d.mu.Lock(); defer d.mu.Unlock(); return d.seen }

func newLimited(t *testing.T, opts tokenlimit.Options) (http.Handler, *door, *clock) {
	t.Helper()
	c := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	if opts.Store == nil {
		opts.Store = memstore.New(memstore.Options{Now: c.Now})
	}
	opts.ClientAddr = func(r *http.Request) netip.Addr { return netip.MustParseAddrPort(r.RemoteAddr).Addr() }
	d := &door{}
	return tokenlimit.New(opts).Wrap("admin-api", d), d, c
}

func send(h http.Handler, addr, token string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("GET", "/admin/api/v1/plans", nil)
	r.RemoteAddr = addr
	r.Header.Set("Authorization", "Bearer "+token)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestFailedAuthenticationsAreLimited(t *testing.T) {
	h, d, c := newLimited(t, tokenlimit.Options{})
	statuses := map[int]int{}
	for range 300 {
		w := send(h, "192.0.2.7:4000", "wrong")
		statuses[w.Code]++
		if w.Code == http.StatusTooManyRequests {
			ra, err := strconv.Atoi(w.Header().Get("Retry-After"))
			var p struct {
				Status int    `json:"status"`
				Detail string `json:"detail"`
			}
			if err != nil || ra < 1 || json.Unmarshal(w.Body.Bytes(), &p) != nil || p.Status != 429 || p.Detail == "" {
				t.Fatalf("429 with Retry-After %q and body %s", w.Header().Get("Retry-After"), w.Body)
			}
		}
	}
	if statuses[http.StatusUnauthorized] != tokenlimit.DefaultFailures || statuses[http.StatusTooManyRequests] != 300-tokenlimit.DefaultFailures {
		t.Errorf("300 wrong tokens: %v, want %d answered 401 and the rest 429", statuses, tokenlimit.DefaultFailures)
	}
	if d.count() != tokenlimit.DefaultFailures {
		t.Errorf("the door authenticated %d requests, want %d", d.count(), tokenlimit.DefaultFailures)
	}

	t.Run("TheAddressIsHeldEvenWithTheRightToken", func(t *testing.T) {
		if w := send(h, "192.0.2.7:4001", "good"); w.Code != http.StatusTooManyRequests {
			t.Errorf("status %d, want 429", w.Code)
		}
	})
	t.Run("OtherAddressesAreNot", func(t *testing.T) {
		if w := send(h, "198.51.100.1:4000", "good"); w.Code != http.StatusNoContent {
			t.Errorf("status %d, want 204", w.Code)
		}
		if w := send(h, "198.51.100.1:4000", "wrong"); w.Code != http.StatusUnauthorized {
			t.Errorf("status %d, want 401", w.Code)
		}
	})
	t.Run("OneIPv6BlockIsOneAddress", func(t *testing.T) {
		n := 0
		for i := range 2 * tokenlimit.DefaultFailures {
			addr := netip.AddrPortFrom(netip.MustParseAddr("2001:db8:1:2::"+strconv.FormatInt(int64(i+1), 16)), 4000)
			if send(h, addr.String(), "wrong").Code == http.StatusUnauthorized {
				n++
			}
		}
		if n != tokenlimit.DefaultFailures {
			t.Errorf("%d answered 401 across one /64, want %d", n, tokenlimit.DefaultFailures)
		}
	})
	t.Run("TheBucketRefills", func(t *testing.T) {
		c.Add(time.Minute / tokenlimit.DefaultFailures)
		if w := send(h, "192.0.2.7:4000", "wrong"); w.Code != http.StatusUnauthorized {
			t.Errorf("a refill's worth later: status %d, want 401", w.Code)
		}
		if w := send(h, "192.0.2.7:4000", "good"); w.Code != http.StatusTooManyRequests {
			t.Errorf("after the refilled failure is spent: status %d, want 429", w.Code)
		}
	})
}

func TestRequestsAreLimited(t *testing.T) {
	h, d, _ := newLimited(t, tokenlimit.Options{Requests: 50})
	served := 0
	for range 80 {
		if send(h, "192.0.2.9:4000", "good").Code == http.StatusNoContent {
			served++
		}
	}
	if served != 50 || d.count() != 50 {
		t.Errorf("80 requests: %d served (door saw %d), want 50", served, d.count())
	}
}

// failing is a store that is down.
type failing struct{}

func (failing) Allow(context.Context, enforce.Request) (enforce.Decision, error) {
	return enforce.Decision{}, errors.New("redis: connection refused")
}
func (failing) Peek(context.Context, enforce.Request) (enforce.Decision, error) {
	return enforce.Decision{}, errors.New("redis: connection refused")
}

func TestStoreDownCountsInTheFallback(t *testing.T) {
	c := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	h, d, _ := newLimited(t, tokenlimit.Options{Store: failing{},
		Fallback: memstore.New(memstore.Options{Now: c.Now})})
	for range 100 {
		send(h, "192.0.2.7:4000", "wrong")
	}
	if d.count() != tokenlimit.DefaultFailures {
		t.Errorf("with the shared store down, the door saw %d wrong tokens, want %d", d.count(), tokenlimit.DefaultFailures)
	}
}
