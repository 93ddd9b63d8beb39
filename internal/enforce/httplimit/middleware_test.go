package httplimit_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/httplimit"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
)

// t0 is 23 s before a minute boundary (1724188800) and 2423 s before an hour
// boundary (1724191200), so window resets are round, known numbers.
var t0 = time.Unix(1724188777, 0)

const (
	routeSearch  = "GET /api/search"
	routeItems   = "GET /api/items/{id}"
	routeReports = "POST /api/reports"
	routeAsync   = "POST /api/async"
	routeOpen    = "GET /api/open"
	routeStatus  = "GET /api/rate-limit-status"
)

var (
	proCaller = enforce.Caller{Subject: "key:7", KeyID: 7, UserID: 3, Plan: "pro", Limits: []enforce.Limit{
		{Name: "pro-global", Algorithm: enforce.FixedWindow, Limit: 10000, Window: time.Hour},
		{Name: "pro-search", Algorithm: enforce.FixedWindow, Limit: 100, Window: time.Minute, Route: routeSearch},
	}}
	degradeCaller = enforce.Caller{Subject: "key:8", KeyID: 8, Plan: "free", Limits: []enforce.Limit{
		{Name: "free-global", Algorithm: enforce.FixedWindow, Limit: 100, Window: time.Minute},
		{Name: "free-search", Algorithm: enforce.FixedWindow, Limit: 1, Window: time.Minute, Mode: enforce.ModeDegrade, Route: routeSearch},
	}}
	mixedCaller = enforce.Caller{Subject: "key:9", KeyID: 9, Plan: "mixed", Limits: []enforce.Limit{
		{Name: "mixed-global", Algorithm: enforce.FixedWindow, Limit: 1, Window: time.Minute},
		{Name: "mixed-search", Algorithm: enforce.FixedWindow, Limit: 1, Window: time.Minute, Mode: enforce.ModeDegrade, Route: routeSearch},
	}}
	queueCaller = enforce.Caller{Subject: "key:10", KeyID: 10, Plan: "queue", Limits: []enforce.Limit{
		// 10 per second: one slot every 100 ms, two may wait.
		{Name: "queue-reports", Algorithm: enforce.LeakyBucket, Limit: 10, Window: time.Second, Burst: 2, Mode: enforce.ModeQueue, Route: routeReports},
		{Name: "queue-async", Algorithm: enforce.LeakyBucket, Limit: 10, Window: time.Second, Burst: 2, Mode: enforce.ModeQueue, Route: routeAsync},
	}}
	slowCaller = enforce.Caller{Subject: "key:11", KeyID: 11, Plan: "slow", Limits: []enforce.Limit{
		// One slot every 5 s: the second request would wait 5 s.
		{Name: "slow-reports", Algorithm: enforce.LeakyBucket, Limit: 1, Window: 5 * time.Second, Burst: 5, Mode: enforce.ModeQueue, Route: routeReports},
	}}
	anonLimits = []enforce.Limit{
		{Name: "anon-items", Algorithm: enforce.FixedWindow, Limit: 2, Window: time.Minute, Route: routeItems},
	}
)

// seen is what the protected handler learned from the middleware.
type seen struct {
	caller      enforce.Caller
	callerOK    bool
	decision    enforce.Decision
	decisionOK  bool
	degraded    bool
	handlerRuns int
}

type mwEnv struct {
	clock *mwClock
	store *memstore.Store
	res   *mwResolver
	mw    *httplimit.Middleware
	mux   *http.ServeMux
	reg   *prometheus.Registry

	mu   sync.Mutex
	seen seen
}

func newMWEnv(t *testing.T, opts httplimit.Options) *mwEnv {
	t.Helper()
	e := &mwEnv{clock: newMWClock(t0), reg: prometheus.NewRegistry()}
	e.store = memstore.New(memstore.Options{Now: e.clock.Now})
	e.res = &mwResolver{
		Keys: map[string]enforce.Caller{
			"sk_test_pro": proCaller, "sk_test_degrade": degradeCaller, "sk_test_mixed": mixedCaller,
			"sk_test_queue": queueCaller, "sk_test_slow": slowCaller,
		},
		AnonLimits: anonLimits,
	}
	opts.Now = e.clock.Now
	opts.Registerer = e.reg
	e.mw = httplimit.NewMiddleware(e.store, e.res, opts)
	h := http.HandlerFunc(e.handle)
	e.mux = http.NewServeMux()
	e.mux.Handle(routeSearch, e.mw.Wrap(h))
	e.mux.Handle(routeItems, e.mw.Wrap(h))
	e.mux.Handle(routeReports, e.mw.Wrap(h))
	e.mux.Handle(routeAsync, e.mw.WrapAsync(h))
	e.mux.Handle(routeOpen, e.mw.Wrap(h))
	e.mux.Handle(routeStatus, e.mw.StatusHandler())
	return e
}

func (e *mwEnv) handle(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	e.seen.caller, e.seen.callerOK = httplimit.CallerFrom(r.Context())
	e.seen.decision, e.seen.decisionOK = httplimit.DecisionFrom(r.Context())
	e.seen.degraded = httplimit.Degraded(r.Context())
	e.seen.handlerRuns++
	e.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain")
	io.WriteString(w, "served")
}

func (e *mwEnv) lastSeen() seen {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.seen
}

// do sends one request from 203.0.113.9 with key (if any) and returns the
// recorded response.
func (e *mwEnv) do(method, path, key string) *httptest.ResponseRecorder {
	return e.doCtx(context.Background(), method, path, key)
}

func (e *mwEnv) doCtx(ctx context.Context, method, path, key string) *httptest.ResponseRecorder {
	r := httptest.NewRequestWithContext(ctx, method, path, nil)
	r.RemoteAddr = "203.0.113.9:5123"
	if key != "" {
		r.Header.Set("Authorization", "Bearer "+key)
	}
	w := httptest.NewRecorder()
	e.mux.ServeHTTP(w, r)
	return w
}

func (e *mwEnv) repeat(t *testing.T, n int, method, path, key string) {
	t.Helper()
	for i := range n {
		if w := e.do(method, path, key); w.Code != http.StatusOK {
			t.Fatalf("priming request %d: status %d, body %s", i+1, w.Code, w.Body)
		}
	}
}

// rateLimitHeaders lists every header the middleware may write; each case
// states all of them ("" meaning absent).
var rateLimitHeaders = []string{
	"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset",
	"RateLimit-Policy", "RateLimit", "Retry-After", "Content-Type",
	httplimit.HeaderDegraded, httplimit.HeaderQueueDelay, httplimit.HeaderStoreDegraded,
}

func TestMiddlewareHeaderConformance(t *testing.T) {
	cases := []struct {
		name      string
		prime     int           // search requests made first
		advance   time.Duration // clock moved after priming
		path      string
		wantCode  int
		want      map[string]string
		wantBody  *httplimit.RejectionBody
		wantItems []sfItem // RateLimit parsed back, merged with RateLimit-Policy
	}{
		{
			name: "AdmittedNamesTheBindingLayer", prime: 63, path: "/api/search?q=x", wantCode: http.StatusOK,
			want: map[string]string{
				"X-RateLimit-Limit": "100", "X-RateLimit-Remaining": "36", "X-RateLimit-Reset": "1724188800",
				"RateLimit-Policy": `"pro-global";q=10000;w=3600, "pro-search";q=100;w=60`,
				"RateLimit":        `"pro-global";r=9936;t=2423, "pro-search";r=36;t=23`,
				"Content-Type":     "text/plain",
			},
			wantItems: []sfItem{
				{Name: "pro-global", Params: map[string]int64{"q": 10000, "w": 3600, "r": 9936, "t": 2423}},
				{Name: "pro-search", Params: map[string]int64{"q": 100, "w": 60, "r": 36, "t": 23}},
			},
		},
		{
			name: "RejectedAtTheLimit", prime: 100, path: "/api/search?q=x", wantCode: http.StatusTooManyRequests,
			want: map[string]string{
				"X-RateLimit-Limit": "100", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1724188800",
				"RateLimit-Policy": `"pro-global";q=10000;w=3600, "pro-search";q=100;w=60`,
				"RateLimit":        `"pro-global";r=9900;t=2423, "pro-search";r=0;t=23`,
				"Retry-After":      "23", "Content-Type": "application/json",
			},
			wantBody: &httplimit.RejectionBody{Error: "rate_limit_exceeded", RetryAfter: 23, Limit: 100, Policy: "pro-search",
				Message: `Rate limit exceeded: policy "pro-search" allows 100 per minute. Retry in 23 s.`},
			wantItems: []sfItem{
				{Name: "pro-global", Params: map[string]int64{"q": 10000, "w": 3600, "r": 9900, "t": 2423}},
				{Name: "pro-search", Params: map[string]int64{"q": 100, "w": 60, "r": 0, "t": 23}},
			},
		},
		{
			name: "RetryAfterRoundsUpToWholeSeconds", prime: 100, advance: 10200 * time.Millisecond, path: "/api/search?q=x",
			wantCode: http.StatusTooManyRequests,
			want: map[string]string{
				"X-RateLimit-Limit": "100", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1724188800",
				"RateLimit-Policy": `"pro-global";q=10000;w=3600, "pro-search";q=100;w=60`,
				"RateLimit":        `"pro-global";r=9900;t=2413, "pro-search";r=0;t=13`,
				"Retry-After":      "13", "Content-Type": "application/json",
			},
			wantBody: &httplimit.RejectionBody{Error: "rate_limit_exceeded", RetryAfter: 13, Limit: 100, Policy: "pro-search",
				Message: `Rate limit exceeded: policy "pro-search" allows 100 per minute. Retry in 13 s.`},
			wantItems: []sfItem{
				{Name: "pro-global", Params: map[string]int64{"q": 10000, "w": 3600, "r": 9900, "t": 2413}},
				{Name: "pro-search", Params: map[string]int64{"q": 100, "w": 60, "r": 0, "t": 13}},
			},
		},
		{
			name: "RetryAfterAtLeastOneSecond", prime: 100, advance: 22900 * time.Millisecond, path: "/api/search?q=x",
			wantCode: http.StatusTooManyRequests,
			want: map[string]string{
				"X-RateLimit-Limit": "100", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1724188800",
				"RateLimit-Policy": `"pro-global";q=10000;w=3600, "pro-search";q=100;w=60`,
				"RateLimit":        `"pro-global";r=9900;t=2401, "pro-search";r=0;t=1`,
				"Retry-After":      "1", "Content-Type": "application/json",
			},
			wantBody: &httplimit.RejectionBody{Error: "rate_limit_exceeded", RetryAfter: 1, Limit: 100, Policy: "pro-search",
				Message: `Rate limit exceeded: policy "pro-search" allows 100 per minute. Retry in 1 s.`},
			wantItems: []sfItem{
				{Name: "pro-global", Params: map[string]int64{"q": 10000, "w": 3600, "r": 9900, "t": 2401}},
				{Name: "pro-search", Params: map[string]int64{"q": 100, "w": 60, "r": 0, "t": 1}},
			},
		},
		{
			name: "NewWindowAdmitsAgain", prime: 100, advance: 23 * time.Second, path: "/api/search?q=x", wantCode: http.StatusOK,
			want: map[string]string{
				// The hourly layer has the smaller share left (98.99 % < 99 %).
				"X-RateLimit-Limit": "10000", "X-RateLimit-Remaining": "9899", "X-RateLimit-Reset": "1724191200",
				"RateLimit-Policy": `"pro-global";q=10000;w=3600, "pro-search";q=100;w=60`,
				"RateLimit":        `"pro-global";r=9899;t=2400, "pro-search";r=99;t=60`,
				"Content-Type":     "text/plain",
			},
			wantItems: []sfItem{
				{Name: "pro-global", Params: map[string]int64{"q": 10000, "w": 3600, "r": 9899, "t": 2400}},
				{Name: "pro-search", Params: map[string]int64{"q": 100, "w": 60, "r": 99, "t": 60}},
			},
		},
		{
			name: "RouteWithoutTierGetsPlanWideOnly", prime: 5, path: "/api/items/1", wantCode: http.StatusOK,
			want: map[string]string{
				"X-RateLimit-Limit": "10000", "X-RateLimit-Remaining": "9994", "X-RateLimit-Reset": "1724191200",
				"RateLimit-Policy": `"pro-global";q=10000;w=3600`,
				"RateLimit":        `"pro-global";r=9994;t=2423`,
				"Content-Type":     "text/plain",
			},
			wantItems: []sfItem{
				{Name: "pro-global", Params: map[string]int64{"q": 10000, "w": 3600, "r": 9994, "t": 2423}},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newMWEnv(t, httplimit.Options{})
			e.repeat(t, tc.prime, "GET", "/api/search?q=x", "sk_test_pro")
			e.clock.Advance(tc.advance)
			w := e.do("GET", tc.path, "sk_test_pro")
			if w.Code != tc.wantCode {
				t.Fatalf("status %d, want %d; body %s", w.Code, tc.wantCode, w.Body)
			}
			for _, h := range rateLimitHeaders {
				if got := w.Header().Get(h); got != tc.want[h] {
					t.Errorf("%s = %q, want %q", h, got, tc.want[h])
				}
			}
			// Parse both fields back as a client would and check that they
			// describe the same policies in the same order.
			policy := parseSFList(t, w.Header().Get("RateLimit-Policy"))
			state := parseSFList(t, w.Header().Get("RateLimit"))
			if len(policy) != len(tc.wantItems) || len(state) != len(tc.wantItems) {
				t.Fatalf("parsed %d policies and %d states, want %d", len(policy), len(state), len(tc.wantItems))
			}
			for i, want := range tc.wantItems {
				if policy[i].Name != want.Name || state[i].Name != want.Name {
					t.Errorf("item %d names %q/%q, want %q", i, policy[i].Name, state[i].Name, want.Name)
				}
				got := map[string]int64{}
				for k, v := range policy[i].Params {
					got[k] = v
				}
				for k, v := range state[i].Params {
					got[k] = v
				}
				if len(got) != len(want.Params) {
					t.Errorf("item %d params %v, want %v", i, got, want.Params)
				}
				for k, v := range want.Params {
					if got[k] != v {
						t.Errorf("item %d %s=%d, want %d", i, k, got[k], v)
					}
				}
			}
			if tc.wantBody == nil {
				if w.Body.String() != "served" {
					t.Errorf("body %q, want the handler's", w.Body)
				}
				return
			}
			var body httplimit.RejectionBody
			dec := json.NewDecoder(w.Body)
			dec.DisallowUnknownFields()
			if err := dec.Decode(&body); err != nil {
				t.Fatalf("429 body: %v", err)
			}
			if body != *tc.wantBody {
				t.Errorf("429 body %+v, want %+v", body, *tc.wantBody)
			}
		})
	}
}

func TestMiddlewareInvalidKeyIsNeverAnonymous(t *testing.T) {
	cases := []struct {
		name   string
		header string
		value  string
	}{
		{name: "UnknownBearer", header: "Authorization", value: "Bearer sk_test_nope"},
		{name: "UnknownXAPIKey", header: "X-API-Key", value: "sk_test_nope"},
		{name: "LowercaseSchemeUnknownKey", header: "Authorization", value: "bearer sk_test_nope"},
		{name: "EmptyBearer", header: "Authorization", value: "Bearer "},
		{name: "OtherScheme", header: "Authorization", value: "Basic dXNlcjpwYXNz"},
		{name: "KeyWithInnerSpace", header: "Authorization", value: "Bearer sk_test pro"},
		{name: "OversizedKey", header: "X-API-Key", value: strings.Repeat("k", 300)},
		{name: "NonASCIIKey", header: "X-API-Key", value: "sk_tëst_pro"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newMWEnv(t, httplimit.Options{})
			r := httptest.NewRequest("GET", "/api/items/1", nil)
			r.RemoteAddr = "203.0.113.9:5123"
			r.Header.Set(tc.header, tc.value)
			w := httptest.NewRecorder()
			e.mux.ServeHTTP(w, r)
			if w.Code != http.StatusUnauthorized {
				t.Fatalf("status %d, want 401", w.Code)
			}
			if got := w.Header().Get("WWW-Authenticate"); got != `Bearer error="invalid_token"` {
				t.Errorf("WWW-Authenticate %q", got)
			}
			if got := w.Header().Get("Content-Type"); got != "application/json" {
				t.Errorf("Content-Type %q", got)
			}
			var body httplimit.ErrorBody
			if err := json.NewDecoder(w.Body).Decode(&body); err != nil {
				t.Fatal(err)
			}
			if body.Error != "invalid_api_key" || body.Message == "" {
				t.Errorf("body %+v", body)
			}
			if n := e.res.AnonCalls.Load(); n != 0 {
				t.Errorf("anonymous plan resolved %d times for a presented key", n)
			}
			if got := e.lastSeen().handlerRuns; got != 0 {
				t.Errorf("handler ran %d times", got)
			}
			if got := w.Header().Get("X-RateLimit-Limit"); got != "" {
				t.Errorf("X-RateLimit-Limit %q on a 401", got)
			}
		})
	}
	t.Run("ValidXAPIKeyResolves", func(t *testing.T) {
		e := newMWEnv(t, httplimit.Options{})
		r := httptest.NewRequest("GET", "/api/items/1", nil)
		r.Header.Set("X-API-Key", "sk_test_pro")
		w := httptest.NewRecorder()
		e.mux.ServeHTTP(w, r)
		s := e.lastSeen()
		if w.Code != http.StatusOK || !s.callerOK || s.caller.Subject != "key:7" || s.caller.Plan != "pro" {
			t.Errorf("status %d, caller %+v (ok %v)", w.Code, s.caller, s.callerOK)
		}
	})
}

func TestMiddlewareRoutePatternSharesTier(t *testing.T) {
	e := newMWEnv(t, httplimit.Options{})
	steps := []struct {
		path      string
		wantCode  int
		remaining string
	}{
		{"/api/items/1", http.StatusOK, "1"},
		{"/api/items/2", http.StatusOK, "0"},
		{"/api/items/3", http.StatusTooManyRequests, "0"},
		{"/api/items/1", http.StatusTooManyRequests, "0"},
	}
	for i, s := range steps {
		w := e.do("GET", s.path, "")
		if w.Code != s.wantCode || w.Header().Get("X-RateLimit-Remaining") != s.remaining {
			t.Errorf("step %d %s: status %d remaining %q, want %d %q", i, s.path, w.Code,
				w.Header().Get("X-RateLimit-Remaining"), s.wantCode, s.remaining)
		}
	}
	seenBy := e.lastSeen()
	if seenBy.caller.Subject != "ip:203.0.113.9" || seenBy.caller.Plan != "anonymous" {
		t.Errorf("anonymous caller %+v", seenBy.caller)
	}
	if seenBy.decision.Layers[0].Limit.Name != "anon-items" {
		t.Errorf("decision layers %+v", seenBy.decision.Layers)
	}

	t.Run("RouteWithoutLimitsPassesUntouched", func(t *testing.T) {
		before := e.lastSeen().handlerRuns
		w := e.do("GET", "/api/open", "")
		if w.Code != http.StatusOK || w.Body.String() != "served" {
			t.Fatalf("status %d body %q", w.Code, w.Body)
		}
		for _, h := range rateLimitHeaders[:6] {
			if got := w.Header().Get(h); got != "" {
				t.Errorf("%s = %q on an unlimited route", h, got)
			}
		}
		s := e.lastSeen()
		if s.handlerRuns != before+1 || !s.callerOK || s.decisionOK || s.degraded {
			t.Errorf("handler saw %+v", s)
		}
	})
}

func TestMiddlewareDegradeMode(t *testing.T) {
	e := newMWEnv(t, httplimit.Options{})
	first := e.do("GET", "/api/search?q=x", "sk_test_degrade")
	if first.Code != http.StatusOK || first.Header().Get(httplimit.HeaderDegraded) != "" || e.lastSeen().degraded {
		t.Fatalf("first request: status %d, degraded header %q", first.Code, first.Header().Get(httplimit.HeaderDegraded))
	}
	for i := range 3 {
		w := e.do("GET", "/api/search?q=x", "sk_test_degrade")
		s := e.lastSeen()
		if w.Code != http.StatusOK || w.Body.String() != "served" {
			t.Fatalf("over-limit request %d: status %d body %q", i, w.Code, w.Body)
		}
		if got := w.Header().Get(httplimit.HeaderDegraded); got != "free-search" {
			t.Errorf("%s = %q, want free-search", httplimit.HeaderDegraded, got)
		}
		if !s.degraded || !s.decisionOK || s.decision.Allowed {
			t.Errorf("handler saw degraded=%v decision %+v", s.degraded, s.decision)
		}
		if got := w.Header().Get("Retry-After"); got != "" {
			t.Errorf("Retry-After %q on a degraded answer", got)
		}
		// A degraded answer is not admitted, so it spends nothing plan-wide.
		if got := w.Header().Get("RateLimit"); got != `"free-global";r=99;t=23, "free-search";r=0;t=23` {
			t.Errorf("RateLimit = %q", got)
		}
	}

	t.Run("RejectLayerWinsOverDegrade", func(t *testing.T) {
		if w := e.do("GET", "/api/search?q=x", "sk_test_mixed"); w.Code != http.StatusOK {
			t.Fatalf("first: %d", w.Code)
		}
		runs := e.lastSeen().handlerRuns
		w := e.do("GET", "/api/search?q=x", "sk_test_mixed")
		if w.Code != http.StatusTooManyRequests || w.Header().Get(httplimit.HeaderDegraded) != "" {
			t.Errorf("status %d, degraded %q; want a plain 429", w.Code, w.Header().Get(httplimit.HeaderDegraded))
		}
		if e.lastSeen().handlerRuns != runs {
			t.Error("handler ran for a rejected request")
		}
	})
}

func TestMiddlewareQueueMode(t *testing.T) {
	t.Run("WaitsItsTurn", func(t *testing.T) {
		e := newMWEnv(t, httplimit.Options{})
		steps := []struct {
			wantCode  int
			wantDelay string
			wantWait  time.Duration
			rateLimit string
		}{
			{http.StatusOK, "", 0, `"queue-reports";r=2;t=1`},
			{http.StatusOK, "100", 100 * time.Millisecond, `"queue-reports";r=1;t=1`},
			{http.StatusOK, "200", 200 * time.Millisecond, `"queue-reports";r=0;t=1`},
			{http.StatusTooManyRequests, "", 0, `"queue-reports";r=0;t=1`},
		}
		for i, s := range steps {
			start := time.Now()
			w := e.do("POST", "/api/reports", "sk_test_queue")
			took := time.Since(start)
			if w.Code != s.wantCode || w.Header().Get(httplimit.HeaderQueueDelay) != s.wantDelay || w.Header().Get("RateLimit") != s.rateLimit {
				t.Errorf("request %d: status %d, delay %q, RateLimit %q; want %d %q %q", i, w.Code,
					w.Header().Get(httplimit.HeaderQueueDelay), w.Header().Get("RateLimit"), s.wantCode, s.wantDelay, s.rateLimit)
			}
			// A lower bound only: the request must not run before its turn.
			if took < s.wantWait {
				t.Errorf("request %d returned after %s, before its turn at %s", i, took, s.wantWait)
			}
		}
		if got := e.lastSeen().handlerRuns; got != 3 {
			t.Errorf("handler ran %d times, want 3", got)
		}
	})

	t.Run("CancelledWhileWaitingNeverRunsHandler", func(t *testing.T) {
		e := newMWEnv(t, httplimit.Options{})
		if w := e.do("POST", "/api/reports", "sk_test_slow"); w.Code != http.StatusOK {
			t.Fatalf("first: %d", w.Code)
		}
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(50*time.Millisecond, cancel)
		start := time.Now()
		w := e.doCtx(ctx, "POST", "/api/reports", "sk_test_slow")
		if took := time.Since(start); took >= 5*time.Second {
			t.Errorf("cancelled request held for %s", took)
		}
		if w.Code != http.StatusServiceUnavailable || w.Header().Get(httplimit.HeaderQueueDelay) != "5000" {
			t.Errorf("status %d delay %q", w.Code, w.Header().Get(httplimit.HeaderQueueDelay))
		}
		if got := e.lastSeen().handlerRuns; got != 1 {
			t.Errorf("handler ran %d times, want 1 (the first request only)", got)
		}
	})

	t.Run("WaitLongerThanMaxIsRejectedAtOnce", func(t *testing.T) {
		e := newMWEnv(t, httplimit.Options{MaxQueueWait: time.Second})
		e.do("POST", "/api/reports", "sk_test_slow")
		w := e.do("POST", "/api/reports", "sk_test_slow")
		var body httplimit.RejectionBody
		if err := json.NewDecoder(w.Body).Decode(&body); err != nil {
			t.Fatal(err)
		}
		if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "5" ||
			body.Error != "rate_limit_exceeded" || body.RetryAfter != 5 || body.Policy != "slow-reports" || body.Limit != 1 {
			t.Errorf("status %d Retry-After %q body %+v", w.Code, w.Header().Get("Retry-After"), body)
		}
		if got := e.lastSeen().handlerRuns; got != 1 {
			t.Errorf("handler ran %d times, want 1", got)
		}
	})

	t.Run("AsyncHandlerGetsDelayWithoutWaiting", func(t *testing.T) {
		e := newMWEnv(t, httplimit.Options{})
		e.do("POST", "/api/async", "sk_test_queue")
		w := e.do("POST", "/api/async", "sk_test_queue")
		s := e.lastSeen()
		if w.Code != http.StatusOK || w.Header().Get(httplimit.HeaderQueueDelay) != "100" || s.decision.Delay != 100*time.Millisecond {
			t.Errorf("status %d delay header %q decision delay %s", w.Code, w.Header().Get(httplimit.HeaderQueueDelay), s.decision.Delay)
		}
	})
}

func TestMiddlewareContextValues(t *testing.T) {
	e := newMWEnv(t, httplimit.Options{})
	e.do("GET", "/api/search?q=x", "sk_test_pro")
	s := e.lastSeen()
	if !s.callerOK || s.caller.Subject != proCaller.Subject || s.caller.KeyID != 7 || s.caller.UserID != 3 || s.caller.Plan != "pro" {
		t.Errorf("CallerFrom = %+v, %v", s.caller, s.callerOK)
	}
	if !s.decisionOK || !s.decision.Allowed || len(s.decision.Layers) != 2 || s.decision.Layers[1].Limit.Name != "pro-search" || s.degraded {
		t.Errorf("DecisionFrom = %+v, %v; degraded %v", s.decision, s.decisionOK, s.degraded)
	}
	if _, ok := httplimit.CallerFrom(context.Background()); ok {
		t.Error("CallerFrom outside the middleware reported ok")
	}
	if _, ok := httplimit.DecisionFrom(context.Background()); ok {
		t.Error("DecisionFrom outside the middleware reported ok")
	}
	if httplimit.Degraded(context.Background()) {
		t.Error("Degraded outside the middleware")
	}
}
