package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/httplimit"
	"github.com/sluicehq/sluice/internal/enforce/redisstore"
)

// slotStep is one operation of a slot case, at an offset from epoch:
// acquire a lease (kept as the case's next lease), peek, or release or
// renew the lease numbered lease.
type slotStep struct {
	at      time.Duration
	op      string // "acquire", "peek", "release", "renew"
	key     string // the request's Key
	lease   int    // release, renew: which acquisition
	allowed bool
	// layers are each layer's (allowed, remaining), in order.
	layers [][2]int64
}

type slotCase struct {
	name   string
	lease  time.Duration
	limits []enforce.Limit
	steps  []slotStep
}

func slotCases() []slotCase {
	one := []enforce.Limit{{Name: "cc", Algorithm: enforce.Concurrency, Limit: 2}}
	yes := func(at time.Duration, remaining int64) slotStep {
		return slotStep{at: at, op: "acquire", allowed: true, layers: [][2]int64{{1, remaining}}}
	}
	no := func(at time.Duration) slotStep {
		return slotStep{at: at, op: "acquire", layers: [][2]int64{{0, 0}}}
	}
	return []slotCase{
		{"NSlotsThenRefusedUntilOneIsReleased", time.Minute, one, []slotStep{
			yes(0, 1), yes(0, 0), no(0), no(time.Second),
			{at: time.Second, op: "release", lease: 0},
			{at: time.Second, op: "peek", allowed: true, layers: [][2]int64{{1, 1}}},
			yes(time.Second, 0), no(2 * time.Second),
		}},
		{"ReleasedTwiceFreesOneSlot", time.Minute, one, []slotStep{
			yes(0, 1), yes(0, 0),
			{op: "release", lease: 0}, {op: "release", lease: 0},
			{op: "peek", allowed: true, layers: [][2]int64{{1, 1}}},
			yes(0, 0), no(0),
		}},
		{"LeaseExpiresSoACrashedHolderLeaksOneLeaseAtMost", 10 * time.Second, one, []slotStep{
			yes(0, 1), yes(5*time.Second, 0),
			no(9*time.Second + 999*ms),
			yes(10*time.Second, 0), // the first lease ran out at 10 s
			no(14 * time.Second),
			{at: 15 * time.Second, op: "peek", allowed: true, layers: [][2]int64{{1, 1}}},
		}},
		{"RenewedLeaseOutlivesItsFirstTerm", 10 * time.Second, []enforce.Limit{{Name: "cc", Algorithm: enforce.Concurrency, Limit: 1}}, []slotStep{
			{op: "acquire", allowed: true, layers: [][2]int64{{1, 0}}},
			{at: 8 * time.Second, op: "renew", lease: 0},
			{at: 12 * time.Second, op: "acquire", layers: [][2]int64{{0, 0}}},
			{at: 18 * time.Second, op: "acquire", allowed: true, layers: [][2]int64{{1, 0}}},
			// The first lease is gone: renewing it does not take back the slot.
			{at: 19 * time.Second, op: "renew", lease: 0},
			{at: 19 * time.Second, op: "peek", layers: [][2]int64{{0, 0}}},
			{at: 28 * time.Second, op: "peek", allowed: true, layers: [][2]int64{{1, 1}}},
		}},
		{"AllOrNothingOverAPlanWideAndAPerKeyLimit", time.Minute, []enforce.Limit{
			{Name: "plan", Algorithm: enforce.Concurrency, Limit: 3},
			{Name: "key", Algorithm: enforce.Concurrency, Limit: 1, PerKey: true},
		}, []slotStep{
			{op: "acquire", key: "key:1", allowed: true, layers: [][2]int64{{1, 2}, {1, 0}}},
			// Key 1's own limit is full: the plan-wide slot is not taken.
			{op: "acquire", key: "key:1", layers: [][2]int64{{1, 2}, {0, 0}}},
			{op: "peek", key: "key:2", allowed: true, layers: [][2]int64{{1, 2}, {1, 1}}},
			{op: "acquire", key: "key:2", allowed: true, layers: [][2]int64{{1, 1}, {1, 0}}},
			{op: "acquire", key: "key:3", allowed: true, layers: [][2]int64{{1, 0}, {1, 0}}},
			{op: "acquire", key: "key:4", layers: [][2]int64{{0, 0}, {1, 1}}},
			{op: "release", lease: 1},
			{op: "acquire", key: "key:4", allowed: true, layers: [][2]int64{{1, 0}, {1, 0}}},
		}},
		{"FullShadowLimitRefusesNothingAndHoldsNoSlot", time.Minute, []enforce.Limit{
			{Name: "shadow", Algorithm: enforce.Concurrency, Limit: 1, Mode: enforce.ModeShadow},
			{Name: "cc", Algorithm: enforce.Concurrency, Limit: 5},
		}, []slotStep{
			{op: "acquire", allowed: true, layers: [][2]int64{{1, 0}, {1, 4}}},
			{op: "acquire", allowed: true, layers: [][2]int64{{0, 0}, {1, 3}}},
			{op: "release", lease: 1},
			{op: "peek", allowed: true, layers: [][2]int64{{0, 0}, {1, 4}}},
			{op: "release", lease: 0},
			{op: "peek", allowed: true, layers: [][2]int64{{1, 1}, {1, 5}}},
		}},
	}
}

// slotStores are storeKinds as SlotStores.
func TestSlotStoresAgree(t *testing.T) {
	for _, kind := range storeKinds() {
		t.Run(kind.Name, func(t *testing.T) {
			for _, tc := range slotCases() {
				t.Run(tc.name, func(t *testing.T) {
					clock := NewClock()
					store := kind.New(t, clock)
					slots := store.(enforce.SlotStore)
					var leases []*enforce.Lease
					for i, st := range tc.steps {
						clock.Set(Epoch.Add(st.at))
						ctx := context.Background()
						req := enforce.Request{Subject: "dev:1", Key: st.key, Limits: tc.limits}
						var d enforce.Decision
						var err error
						switch st.op {
						case "acquire":
							var l *enforce.Lease
							l, d, err = slots.AcquireSlots(ctx, req, tc.lease)
							if err == nil && (l != nil) != st.allowed {
								t.Fatalf("step %d: lease %v, want one: %v", i, l, st.allowed)
							}
							if l != nil {
								leases = append(leases, l)
							}
						case "peek":
							d, err = store.Peek(ctx, req)
						case "release":
							err = leases[st.lease].Release(ctx)
						case "renew":
							err = leases[st.lease].Renew(ctx)
						}
						if err != nil {
							t.Fatalf("step %d (%s): %v", i, st.op, err)
						}
						if st.op == "release" || st.op == "renew" {
							continue
						}
						if d.Allowed != st.allowed || len(d.Layers) != len(st.layers) {
							t.Fatalf("step %d (%s at %s): allowed %v with %d layers, want %v with %d", i, st.op, st.at, d.Allowed, len(d.Layers), st.allowed, len(st.layers))
						}
						if !d.At.Equal(Epoch.Add(st.at)) {
							t.Errorf("step %d: decided at %s, want the store's clock %s", i, d.At, Epoch.Add(st.at))
						}
						for j, w := range st.layers {
							l := d.Layers[j]
							if l.Allowed != (w[0] == 1) || l.Remaining != w[1] || l.Limit.Name != tc.limits[j].Name {
								t.Errorf("step %d layer %d: %s allowed %v remaining %d, want %s %v %d", i, j, l.Limit.Name, l.Allowed, l.Remaining, tc.limits[j].Name, w[0] == 1, w[1])
							}
							if wantRetry := time.Duration(1-w[0]) * time.Second; l.RetryAfter != wantRetry {
								t.Errorf("step %d layer %d: retry after %s, want %s", i, j, l.RetryAfter, wantRetry)
							}
						}
					}
				})
			}
		})
	}
}

func TestPeekMergesSlotAndRateLayersInOrder(t *testing.T) {
	limits := []enforce.Limit{
		{Name: "fw", Algorithm: enforce.FixedWindow, Limit: 10, Window: time.Minute},
		{Name: "cc", Algorithm: enforce.Concurrency, Limit: 2},
		{Name: "tb", Algorithm: enforce.TokenBucket, Limit: 5, Window: time.Minute},
	}
	for _, kind := range storeKinds() {
		t.Run(kind.Name, func(t *testing.T) {
			clock := NewClock()
			store := kind.New(t, clock)
			ctx := context.Background()
			if _, err := store.Allow(ctx, enforce.Request{Subject: "dev:1", Limits: []enforce.Limit{limits[0], limits[2]}}); err != nil {
				t.Fatal(err)
			}
			if _, _, err := store.(enforce.SlotStore).AcquireSlots(ctx, enforce.Request{Subject: "dev:1", Limits: limits[1:2]}, time.Minute); err != nil {
				t.Fatal(err)
			}
			d, err := store.Peek(ctx, enforce.Request{Subject: "dev:1", Limits: limits})
			if err != nil {
				t.Fatal(err)
			}
			want := []struct {
				name      string
				remaining int64
			}{{"fw", 9}, {"cc", 1}, {"tb", 4}}
			if !d.Allowed || len(d.Layers) != len(want) {
				t.Fatalf("peek: allowed %v, %d layers", d.Allowed, len(d.Layers))
			}
			for i, w := range want {
				if d.Layers[i].Limit.Name != w.name || d.Layers[i].Remaining != w.remaining {
					t.Errorf("layer %d: %s remaining %d, want %s %d", i, d.Layers[i].Limit.Name, d.Layers[i].Remaining, w.name, w.remaining)
				}
			}
		})
	}
}

func TestAllowRefusesAConcurrencyLimit(t *testing.T) {
	for _, kind := range storeKinds() {
		t.Run(kind.Name, func(t *testing.T) {
			store := kind.New(t, NewClock())
			_, err := store.Allow(context.Background(), enforce.Request{Subject: "dev:1", Limits: []enforce.Limit{{Name: "cc", Algorithm: enforce.Concurrency, Limit: 1}}})
			if !errors.Is(err, enforce.ErrInvalidRequest) || !errors.Is(err, enforce.ErrSlotsAllow) {
				t.Fatalf("Allow of a concurrency limit: %v, want ErrInvalidRequest saying to acquire slots", err)
			}
		})
	}
}

func TestAcquireSlotsRefusesBadRequests(t *testing.T) {
	for _, kind := range storeKinds() {
		t.Run(kind.Name, func(t *testing.T) {
			slots := kind.New(t, NewClock()).(enforce.SlotStore)
			for _, tc := range []struct {
				name  string
				req   enforce.Request
				lease time.Duration
			}{
				{"NoSubject", enforce.Request{Limits: []enforce.Limit{{Name: "cc", Algorithm: enforce.Concurrency, Limit: 1}}}, time.Minute},
				{"RateLimit", enforce.Request{Subject: "dev:1", Limits: []enforce.Limit{{Name: "fw", Algorithm: enforce.FixedWindow, Limit: 1, Window: time.Minute}}}, time.Minute},
				{"ZeroLimit", enforce.Request{Subject: "dev:1", Limits: []enforce.Limit{{Name: "cc", Algorithm: enforce.Concurrency}}}, time.Minute},
				{"NoLease", enforce.Request{Subject: "dev:1", Limits: []enforce.Limit{{Name: "cc", Algorithm: enforce.Concurrency, Limit: 1}}}, 0},
			} {
				t.Run(tc.name, func(t *testing.T) {
					if _, _, err := slots.AcquireSlots(context.Background(), tc.req, tc.lease); !errors.Is(err, enforce.ErrInvalidRequest) {
						t.Fatalf("got %v, want ErrInvalidRequest", err)
					}
				})
			}
		})
	}
}

// TestConcurrencyExactAcrossInstances: two RedisStores on separate clients
// share one prefix, as two portal instances share a Redis; many callers
// acquire, hold briefly and release. The number in flight, counted by the
// callers themselves between acquisition and release, never exceeds N.
func TestConcurrencyExactAcrossInstances(t *testing.T) {
	client, prefix := Redis(t)
	stores := []*redisstore.Store{
		newRedisStore(t, client, redisstore.Options{Prefix: prefix, Timeout: 5 * time.Second}),
		newRedisStore(t, InstanceClient(t), redisstore.Options{Prefix: prefix, Timeout: 5 * time.Second}),
	}
	const n = 4
	limits := []enforce.Limit{{Name: "cc", Algorithm: enforce.Concurrency, Limit: n}}
	var inFlight, most, admitted, refused atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for g := range 32 {
		wg.Go(func() {
			store := stores[g%2]
			for range 25 {
				l, d, err := store.AcquireSlots(context.Background(), enforce.Request{Subject: "dev:1", Limits: limits}, time.Minute)
				if err != nil {
					errs <- err
					return
				}
				if l == nil {
					if d.Allowed {
						errs <- fmt.Errorf("allowed without a lease")
						return
					}
					refused.Add(1)
					continue
				}
				admitted.Add(1)
				now := inFlight.Add(1)
				for {
					m := most.Load()
					if now <= m || most.CompareAndSwap(m, now) {
						break
					}
				}
				time.Sleep(time.Millisecond)
				inFlight.Add(-1)
				if err := l.Release(context.Background()); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("admitted %d, refused %d, most in flight %d of %d", admitted.Load(), refused.Load(), most.Load(), n)
	if most.Load() > n {
		t.Fatalf("%d requests in flight at once, limit %d", most.Load(), n)
	}
	if admitted.Load()+refused.Load() != 32*25 || admitted.Load() < n {
		t.Fatalf("admitted %d, refused %d of %d", admitted.Load(), refused.Load(), 32*25)
	}
	// Every slot came back.
	d, err := stores[1].Peek(context.Background(), enforce.Request{Subject: "dev:1", Limits: limits})
	if err != nil || d.Layers[0].Remaining != n {
		t.Fatalf("after all released: %+v, %v; want %d remaining", d.Layers, err, n)
	}
}

// slotResolver gives every anonymous caller the same limits.
type slotResolver struct{ limits []enforce.Limit }

func (r slotResolver) ResolveKey(string) (enforce.Caller, error) {
	return enforce.Caller{}, enforce.ErrInvalidKey
}
func (r slotResolver) Anonymous(ip netip.Addr) enforce.Caller {
	return enforce.Caller{Subject: "ip:" + ip.String(), Plan: "anon", Limits: r.limits}
}

// slotServer is a middleware over a store of kind with a handler that
// blocks until told to finish (or panic).
type slotServer struct {
	store   enforce.Store
	clock   *Clock
	h       http.Handler
	started chan struct{}
	finish  chan string // "return" or "panic"
}

func newSlotServer(t *testing.T, kind Kind, limits []enforce.Limit, opts httplimit.Options) *slotServer {
	s := &slotServer{clock: NewClock(), started: make(chan struct{}, 16), finish: make(chan string, 16)}
	s.store = kind.New(t, s.clock)
	opts.Now = s.clock.Now
	mw := httplimit.NewMiddleware(s.store, slotResolver{limits}, opts)
	s.h = mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.started <- struct{}{}
		select {
		case how := <-s.finish:
			if how == "panic" {
				panic("handler failed")
			}
		case <-r.Context().Done():
		case <-time.After(10 * time.Second): // a request wrongly admitted fails, not hangs
			w.WriteHeader(http.StatusTeapot)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	return s
}

// serve runs one request in the background; its recorder arrives on the
// returned channel when the middleware returns (a panic is recovered, as
// net/http's server would).
func (s *slotServer) serve(ctx context.Context) <-chan *httptest.ResponseRecorder {
	out := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		rec := httptest.NewRecorder()
		defer func() {
			recover()
			out <- rec
		}()
		r := httptest.NewRequestWithContext(ctx, "GET", "/x", nil)
		r.RemoteAddr = "192.0.2.1:1234"
		s.h.ServeHTTP(rec, r)
	}()
	return out
}

func (s *slotServer) remaining(t *testing.T, limits []enforce.Limit) []int64 {
	t.Helper()
	d, err := s.store.Peek(context.Background(), enforce.Request{Subject: "ip:192.0.2.1", Limits: limits})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]int64, len(d.Layers))
	for i, l := range d.Layers {
		out[i] = l.Remaining
	}
	return out
}

func wantRemaining(t *testing.T, got []int64, want ...int64) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("remaining %v, want %v", got, want)
	}
}

func TestMiddlewareHoldsASlotUntilTheHandlerEnds(t *testing.T) {
	limits := []enforce.Limit{{Name: "cc", Algorithm: enforce.Concurrency, Limit: 1}}
	for _, kind := range storeKinds() {
		t.Run(kind.Name, func(t *testing.T) {
			for _, how := range []string{"return", "panic", "cancel"} {
				t.Run("FreedOn_"+how, func(t *testing.T) {
					s := newSlotServer(t, kind, limits, httplimit.Options{})
					ctx, cancel := context.WithCancel(context.Background())
					defer cancel()
					first := s.serve(ctx)
					<-s.started
					wantRemaining(t, s.remaining(t, limits), 0)

					rec := <-s.serve(context.Background())
					if rec.Code != http.StatusTooManyRequests {
						t.Fatalf("second request in flight: %d, want 429", rec.Code)
					}
					if got, want := rec.Header().Get("RateLimit-Policy"), `"cc";q=1;qu="concurrent-requests"`; got != want {
						t.Errorf("RateLimit-Policy %q, want %q", got, want)
					}
					if got, want := rec.Header().Get("RateLimit"), `"cc";r=0;t=0`; got != want {
						t.Errorf("RateLimit %q, want %q", got, want)
					}
					if got := rec.Header().Get("Retry-After"); got != "1" {
						t.Errorf("Retry-After %q, want 1", got)
					}

					switch how {
					case "cancel":
						cancel()
					default:
						s.finish <- how
					}
					<-first
					wantRemaining(t, s.remaining(t, limits), 1)
					third := s.serve(context.Background())
					<-s.started
					s.finish <- "return"
					if rec := <-third; rec.Code != http.StatusOK {
						t.Fatalf("after the first ended: %d, want 200", rec.Code)
					}
					wantRemaining(t, s.remaining(t, limits), 1)
				})
			}
		})
	}
}

func TestMiddlewareSlotsAndRateLayersAreAllOrNothing(t *testing.T) {
	limits := []enforce.Limit{
		{Name: "cc", Algorithm: enforce.Concurrency, Limit: 1},
		{Name: "fw", Algorithm: enforce.FixedWindow, Limit: 2, Window: time.Minute},
	}
	for _, kind := range storeKinds() {
		t.Run(kind.Name, func(t *testing.T) {
			s := newSlotServer(t, kind, limits, httplimit.Options{})
			first := s.serve(context.Background())
			<-s.started
			wantRemaining(t, s.remaining(t, limits), 0, 1)
			// Refused a slot: the window is not charged.
			if rec := <-s.serve(context.Background()); rec.Code != http.StatusTooManyRequests {
				t.Fatalf("refused a slot: %d", rec.Code)
			}
			wantRemaining(t, s.remaining(t, limits), 0, 1)
			s.finish <- "return"
			<-first
			second := s.serve(context.Background())
			<-s.started
			s.finish <- "return"
			<-second
			wantRemaining(t, s.remaining(t, limits), 1, 0)
			// The window rejects: the slot taken first is given back.
			rec := <-s.serve(context.Background())
			if rec.Code != http.StatusTooManyRequests {
				t.Fatalf("over the window: %d", rec.Code)
			}
			if got := rec.Header().Get("RateLimit-Policy"); got != `"cc";q=1;qu="concurrent-requests", "fw";q=2;w=60` {
				t.Errorf("RateLimit-Policy %q", got)
			}
			wantRemaining(t, s.remaining(t, limits), 1, 0)
		})
	}
}

func TestMiddlewareQueueWaitsForASlot(t *testing.T) {
	limits := []enforce.Limit{{Name: "cc", Algorithm: enforce.Concurrency, Limit: 1, Mode: enforce.ModeQueue}}
	for _, kind := range storeKinds() {
		t.Run(kind.Name, func(t *testing.T) {
			t.Run("AdmittedWhenASlotFrees", func(t *testing.T) {
				s := newSlotServer(t, kind, limits, httplimit.Options{MaxQueueWait: time.Minute})
				first := s.serve(context.Background())
				<-s.started
				second := s.serve(context.Background())
				select {
				case <-s.started:
					t.Fatal("the queued request ran while the slot was held")
				case <-time.After(50 * ms):
				}
				s.finish <- "return"
				<-first
				<-s.started // the queued request now holds the slot
				s.finish <- "return"
				rec := <-second
				if rec.Code != http.StatusOK || rec.Header().Get(httplimit.HeaderQueueDelay) == "" {
					t.Fatalf("queued request: %d, %s %q", rec.Code, httplimit.HeaderQueueDelay, rec.Header().Get(httplimit.HeaderQueueDelay))
				}
				// That it waited is shown above (it did not run while the slot
				// was held); the header says how long, which scheduling can
				// make a little under the 50 ms the test slept.
				if ms, err := strconv.Atoi(rec.Header().Get(httplimit.HeaderQueueDelay)); err != nil || ms <= 0 {
					t.Errorf("%s %q, want the positive wait in ms", httplimit.HeaderQueueDelay, rec.Header().Get(httplimit.HeaderQueueDelay))
				}
			})
			t.Run("RejectedAfterMaxQueueWait", func(t *testing.T) {
				s := newSlotServer(t, kind, limits, httplimit.Options{MaxQueueWait: 30 * ms})
				first := s.serve(context.Background())
				<-s.started
				if rec := <-s.serve(context.Background()); rec.Code != http.StatusTooManyRequests {
					t.Fatalf("queued past MaxQueueWait: %d, want 429", rec.Code)
				}
				s.finish <- "return"
				<-first
			})
			t.Run("CancelledWhileWaitingHoldsNothing", func(t *testing.T) {
				s := newSlotServer(t, kind, limits, httplimit.Options{MaxQueueWait: time.Minute})
				first := s.serve(context.Background())
				<-s.started
				ctx, cancel := context.WithCancel(context.Background())
				second := s.serve(ctx)
				time.Sleep(20 * ms)
				cancel()
				if rec := <-second; rec.Code != http.StatusServiceUnavailable {
					t.Fatalf("cancelled while queued: %d, want 503", rec.Code)
				}
				s.finish <- "return"
				<-first
				wantRemaining(t, s.remaining(t, limits), 1)
			})
		})
	}
}

func TestMiddlewareSlotOfACrashedInstanceExpires(t *testing.T) {
	limits := []enforce.Limit{{Name: "cc", Algorithm: enforce.Concurrency, Limit: 1}}
	for _, kind := range storeKinds() {
		t.Run(kind.Name, func(t *testing.T) {
			s := newSlotServer(t, kind, limits, httplimit.Options{SlotLease: 30 * time.Second})
			// A crashed instance took the slot and never gave it back.
			if l, _, err := s.store.(enforce.SlotStore).AcquireSlots(context.Background(), enforce.Request{Subject: "ip:192.0.2.1", Limits: limits}, 30*time.Second); err != nil || l == nil {
				t.Fatalf("acquire: %v, %v", l, err)
			}
			if rec := <-s.serve(context.Background()); rec.Code != http.StatusTooManyRequests {
				t.Fatalf("slot held: %d, want 429", rec.Code)
			}
			s.clock.Set(Epoch.Add(30 * time.Second))
			next := s.serve(context.Background())
			<-s.started
			s.finish <- "return"
			if rec := <-next; rec.Code != http.StatusOK {
				t.Fatalf("after the lease: %d, want 200", rec.Code)
			}
		})
	}
}

func TestStatusShowsFreeSlots(t *testing.T) {
	limits := []enforce.Limit{
		{Name: "cc", Algorithm: enforce.Concurrency, Limit: 2, Window: time.Minute},
		{Name: "fw", Algorithm: enforce.FixedWindow, Limit: 5, Window: time.Minute},
	}
	for _, kind := range storeKinds() {
		t.Run(kind.Name, func(t *testing.T) {
			store := kind.New(t, NewClock())
			if _, _, err := store.(enforce.SlotStore).AcquireSlots(context.Background(), enforce.Request{Subject: "ip:192.0.2.1", Limits: limits[:1]}, time.Minute); err != nil {
				t.Fatal(err)
			}
			mw := httplimit.NewMiddleware(store, slotResolver{limits}, httplimit.Options{})
			r := httptest.NewRequest("GET", "/status", nil)
			r.RemoteAddr = "192.0.2.1:1234"
			w := httptest.NewRecorder()
			mw.StatusHandler().ServeHTTP(w, r)
			var body httplimit.StatusBody
			if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || len(body.Limits) != 2 {
				t.Fatalf("status %d %s: %v", w.Code, w.Body, err)
			}
			cc, fw := body.Limits[0], body.Limits[1]
			if cc.Algorithm != enforce.Concurrency || cc.Remaining != 1 || cc.WindowSeconds != 0 || cc.Limit != 2 {
				t.Errorf("concurrency status %+v, want 1 of 2 free and no window", cc)
			}
			if fw.Remaining != 5 || fw.WindowSeconds != 60 {
				t.Errorf("window status %+v, want 5 left of 60 s", fw)
			}
		})
	}
}
