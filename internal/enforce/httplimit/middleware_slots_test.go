package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/httplimit"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
)

// refusingSlots is a memory store that says when it refuses a slot, so a
// test knows a request is waiting for one without sleeping.
type refusingSlots struct {
	*memstore.Store
	refused chan struct{} // a send (dropped when full) per refusal
}

func (s *refusingSlots) AcquireSlots(ctx context.Context, req enforce.Request, lease time.Duration) (*enforce.Lease, enforce.Decision, error) {
	l, d, err := s.Store.AcquireSlots(ctx, req, lease)
	if err == nil && !d.Allowed {
		select {
		case s.refused <- struct{}{}:
		default:
		}
	}
	return l, d, err
}

// slotServer serves GET /slow, whose handler signals entered and then
// blocks until release is closed, behind mw; do sends one request with key
// sk.
type slotServer struct {
	mux     *http.ServeMux
	entered chan *http.Request
	release chan struct{}
}

func newSlotServer(mw *httplimit.Middleware) *slotServer {
	s := &slotServer{mux: http.NewServeMux(), entered: make(chan *http.Request, 4), release: make(chan struct{})}
	s.mux.Handle("GET /slow", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.entered <- r
		<-s.release
	})))
	return s
}

func (s *slotServer) do() *httptest.ResponseRecorder {
	req := httptest.NewRequest("GET", "/slow", nil)
	req.Header.Set("Authorization", "Bearer sk")
	rec := httptest.NewRecorder()
	s.mux.ServeHTTP(rec, req)
	return rec
}

// goDo sends a request in the background; its answer arrives on the
// returned channel.
func (s *slotServer) goDo() <-chan *httptest.ResponseRecorder {
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() { done <- s.do() }()
	return done
}

func within[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: nothing within 30 s", what)
		panic("unreachable")
	}
}

// TestQueueModeSlotWaits: a request refused by a queue-mode concurrency
// tier waits for a slot, up to MaxQueueWait, and says how long it waited
// in HeaderQueueDelay; past MaxQueueWait it is answered 429.
func TestQueueModeSlotWaits(t *testing.T) {
	limits := []enforce.Limit{
		{Name: "inflight", Algorithm: enforce.Concurrency, Limit: 1, Mode: enforce.ModeQueue},
		{Name: "rate", Algorithm: enforce.FixedWindow, Limit: 100, Window: time.Hour},
	}
	newServer := func(maxWait time.Duration) (*slotServer, *refusingSlots) {
		store := &refusingSlots{Store: memstore.New(memstore.Options{}), refused: make(chan struct{}, 1)}
		res := &mwResolver{Keys: map[string]enforce.Caller{"sk": {Subject: "dev:q", Key: "key:q", Plan: "p", Limits: limits}}}
		return newSlotServer(httplimit.NewMiddleware(store, res, httplimit.Options{MaxQueueWait: maxWait})), store
	}

	t.Run("FreedSlotIsTaken", func(t *testing.T) {
		s, store := newServer(time.Minute)
		first := s.goDo()
		within(t, s.entered, "the first request reaching its handler")
		second := s.goDo()
		within(t, store.refused, "the second request being refused a slot")
		s.release <- struct{}{} // the first handler returns, the second may run
		if rec := within(t, first, "the first answer"); rec.Code != http.StatusOK || rec.Header().Get(httplimit.HeaderQueueDelay) != "" {
			t.Fatalf("first: %d, queue delay %q; want 200 without a wait", rec.Code, rec.Header().Get(httplimit.HeaderQueueDelay))
		}
		r := within(t, s.entered, "the waiting request reaching its handler")
		if !httplimit.HoldsSlots(r.Context()) {
			t.Error("the request that waited holds no slot")
		}
		close(s.release)
		rec := within(t, second, "the second answer")
		ms, err := strconv.Atoi(rec.Header().Get(httplimit.HeaderQueueDelay))
		if rec.Code != http.StatusOK || err != nil || ms < 1 {
			t.Fatalf("second: %d, queue delay %q; want 200 after a wait of at least 1 ms", rec.Code, rec.Header().Get(httplimit.HeaderQueueDelay))
		}
	})

	t.Run("PastMaxQueueWaitRefused", func(t *testing.T) {
		s, _ := newServer(20 * time.Millisecond)
		first := s.goDo()
		within(t, s.entered, "the first request reaching its handler")
		rec := s.do()
		if rec.Code != http.StatusTooManyRequests || rec.Header().Get(httplimit.HeaderQueueDelay) != "" {
			t.Fatalf("past the wait: %d, queue delay %q; want 429 without one", rec.Code, rec.Header().Get(httplimit.HeaderQueueDelay))
		}
		close(s.release)
		within(t, first, "the first answer")
		// The refused request held nothing: the next one is served.
		next := s.goDo()
		within(t, s.entered, "the next request reaching its handler")
		if rec := within(t, next, "the next answer"); rec.Code != http.StatusOK {
			t.Fatalf("next: %d, want 200", rec.Code)
		}
	})
}

// TestDegradedRequestHoldsItsSlot: a request over a degrade-mode tier is
// served reduced, so it holds its concurrency slot while its handler runs;
// a request over a reject-mode tier holds none.
func TestDegradedRequestHoldsItsSlot(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mode  enforce.Mode
		holds bool
	}{
		{"Degrade", enforce.ModeDegrade, true},
		{"Reject", enforce.ModeReject, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			limits := []enforce.Limit{
				{Name: "inflight", Algorithm: enforce.Concurrency, Limit: 1},
				{Name: "rate", Algorithm: enforce.FixedWindow, Limit: 1, Window: time.Hour, Mode: tc.mode},
			}
			caller := enforce.Caller{Subject: "dev:d", Key: "key:d", Plan: "p", Limits: limits}
			res := &mwResolver{Keys: map[string]enforce.Caller{"sk": caller}}
			store := memstore.New(memstore.Options{})
			s := newSlotServer(httplimit.NewMiddleware(store, res, httplimit.Options{}))
			inFlight := func() int64 {
				t.Helper()
				out, err := enforce.NewEngine(store, enforce.EngineOptions{}).Decide(context.Background(), enforce.Ask{Caller: caller, Route: "GET /slow", Peek: true})
				if err != nil {
					t.Fatal(err)
				}
				return 1 - out.Layers[0].Remaining
			}
			first := s.goDo()
			within(t, s.entered, "the first request reaching its handler")
			s.release <- struct{}{}
			if rec := within(t, first, "the first answer"); rec.Code != http.StatusOK {
				t.Fatalf("first: %d", rec.Code)
			}

			over := s.goDo()
			if !tc.holds {
				if rec := within(t, over, "the rejected answer"); rec.Code != http.StatusTooManyRequests {
					t.Fatalf("over the rate: %d, want 429", rec.Code)
				}
				if n := inFlight(); n != 0 {
					t.Fatalf("%d slots held after a rejection, want 0", n)
				}
				return
			}
			r := within(t, s.entered, "the degraded request reaching its handler")
			if !httplimit.Degraded(r.Context()) || !httplimit.HoldsSlots(r.Context()) {
				t.Fatalf("degraded %v, holds slots %v; want both", httplimit.Degraded(r.Context()), httplimit.HoldsSlots(r.Context()))
			}
			if n := inFlight(); n != 1 {
				t.Fatalf("%d slots held while the degraded request runs, want 1", n)
			}
			// Its slot is taken: the next is refused (not degraded, which
			// the rate alone would give).
			if rec := s.do(); rec.Code != http.StatusTooManyRequests {
				t.Fatalf("beside the degraded request: %d, want 429", rec.Code)
			}
			close(s.release)
			if rec := within(t, over, "the degraded answer"); rec.Code != http.StatusOK || rec.Header().Get(httplimit.HeaderDegraded) != "rate" {
				t.Fatalf("degraded: %d, %s %q", rec.Code, httplimit.HeaderDegraded, rec.Header().Get(httplimit.HeaderDegraded))
			}
		})
	}
}
