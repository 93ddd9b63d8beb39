package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/httplimit"
	"github.com/sluicehq/sluice/internal/enforce/redisstore"
	"github.com/sluicehq/sluice/internal/testenv"
)

// skewResolver gives every anonymous caller one sliding-log tier: its reset
// is when the newest admitted request leaves the window (the log is then
// empty), an instant that moves with whichever clock the decision is read
// from.
type skewResolver struct{}

func (skewResolver) ResolveKey(string) (enforce.Caller, error) {
	return enforce.Caller{}, enforce.ErrInvalidKey
}

func (skewResolver) Anonymous(ip netip.Addr) enforce.Caller {
	return enforce.Caller{Subject: "ip:" + ip.String(), Plan: "anonymous", Limits: []enforce.Limit{
		{Name: "anon-items", Algorithm: enforce.SlidingWindowLog, Limit: 10, Window: time.Minute, Route: "GET /api/items/{id}"},
	}}
}

// TestInstancesWithSkewedClocksAgree is the README's "with Redis's clock":
// two instances sharing one Redis, whose own clocks are 7 s ahead and 5 s
// behind, take turns deciding one caller's requests. Every decision and
// every header must be what one instance alone would give: exactly 10
// admitted, Remaining counting down across both, X-RateLimit-Reset a minute
// after the newest admitted request on Redis's clock (so one value on every
// rejection), and Retry-After counting down to the oldest request leaving
// the window. Each bound is taken from Redis's clock around the request, so
// a slow machine (the requests straddling a second) cannot fail it, while an
// instance's own clock, 7 s or 5 s off, would.
func TestInstancesWithSkewedClocksAgree(t *testing.T) {
	client, prefix := testenv.Redis(t)
	ctx := context.Background()
	instance := func(offset time.Duration) http.Handler {
		store, err := redisstore.New(client, redisstore.Options{Prefix: prefix, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		// The instance's own clock, wherever the middleware reads one.
		clock := func() time.Time { return time.Now().Add(offset) }
		mw := httplimit.NewMiddleware(store, skewResolver{}, httplimit.Options{Now: clock})
		mux := http.NewServeMux()
		mux.Handle("GET /api/items/{id}", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write([]byte("ok"))
		})))
		return mux
	}
	instances := []http.Handler{instance(7 * time.Second), instance(-5 * time.Second)}

	redisNow := func() time.Time {
		now, err := client.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		return now
	}
	first := redisNow()
	admitted := 0
	var rejectedResets []int64
	var firstAdmitted time.Time // Redis's clock after the first answer
	for i := range 16 {
		r := httptest.NewRequest("GET", "/api/items/1", nil)
		r.RemoteAddr = "203.0.113.9:5123"
		w := httptest.NewRecorder()
		before := redisNow()
		instances[i%2].ServeHTTP(w, r)
		after := redisNow()
		if i == 0 {
			firstAdmitted = after
		}
		h := w.Header()
		remaining, _ := strconv.Atoi(h.Get("X-RateLimit-Remaining"))
		reset, _ := strconv.ParseInt(h.Get("X-RateLimit-Reset"), 10, 64)
		switch {
		case i < 10:
			if w.Code != http.StatusOK || remaining != 9-i {
				t.Errorf("request %d (instance %d): status %d remaining %d, want 200 and %d", i+1, i%2, w.Code, remaining, 9-i)
			}
			// This request is the newest in the log: the log empties a
			// minute after it was admitted, by Redis's clock.
			if lo, hi := before.Add(time.Minute).Unix(), after.Add(time.Minute).Unix()+1; reset < lo || reset > hi {
				t.Errorf("request %d (instance %d): X-RateLimit-Reset %d, want between %d and %d (a minute after it, on Redis's clock)", i+1, i%2, reset, lo, hi)
			}
			admitted++
		default:
			if w.Code != http.StatusTooManyRequests || remaining != 0 {
				t.Errorf("request %d (instance %d): status %d remaining %d, want 429 and 0", i+1, i%2, w.Code, remaining)
				continue
			}
			rejectedResets = append(rejectedResets, reset)
			retry, _ := strconv.ParseInt(h.Get("Retry-After"), 10, 64)
			// Retry-After counts to the oldest request leaving the window,
			// on Redis's clock: it was admitted between first and the
			// first answer. The instance's own clock would put it 7 s or
			// 5 s off.
			lo, hi := first.Add(time.Minute).Unix()-after.Unix()-1, firstAdmitted.Add(time.Minute).Unix()-before.Unix()+1
			if retry < lo || retry > hi {
				t.Errorf("request %d (instance %d): Retry-After %d, want %d to %d (the oldest request leaving the window, on Redis's clock)", i+1, i%2, retry, lo, hi)
			}
		}
	}
	if admitted != 10 {
		t.Errorf("%d admitted, want 10", admitted)
	}
	// Rejected requests are not logged: every rejection names the same
	// reset, whichever instance answered.
	for _, r := range rejectedResets {
		if r != rejectedResets[0] {
			t.Errorf("the instances gave different X-RateLimit-Reset values on rejections %v, want one", rejectedResets)
			break
		}
	}
}
