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
	"github.com/sluicehq/sluice/internal/enforce/redisstore"
	"github.com/sluicehq/sluice/internal/testenv"
)

// TestCostSettledAfterTheResponse holds both stores to the settle rules:
// a tier counting successes gives 4xx/5xx back, one counting errors gives
// 1xx-3xx back, and a tier with a cost header ends up charged what the
// header said (more or less than its cost, or its cost when the header is
// missing), under each algorithm that can be settled. The middleware's
// own 429 consumes nothing either way.
func TestCostSettledAfterTheResponse(t *testing.T) {
	stores := map[string]func(t *testing.T) enforce.Store{
		"memory": func(t *testing.T) enforce.Store { return memstore.New(memstore.Options{}) },
		"redis": func(t *testing.T) enforce.Store {
			client, prefix := testenv.Redis(t)
			s, err := redisstore.New(client, redisstore.Options{Prefix: prefix, Timeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
	}
	algorithms := []enforce.Algorithm{enforce.FixedWindow, enforce.SlidingWindowCounter, enforce.TokenBucket, enforce.LeakyBucket}
	for name, newStore := range stores {
		for _, algo := range algorithms {
			t.Run(name+"/"+string(algo), func(t *testing.T) {
				settleCase(t, newStore(t), algo)
			})
		}
	}
}

func settleCase(t *testing.T, store enforce.Store, algo enforce.Algorithm) {
	const limit = 100
	tier := func(name, route string, cost int64, when enforce.CountWhen, header string) enforce.Limit {
		return enforce.Limit{Name: name, Route: route, Algorithm: algo, Limit: limit, Window: time.Hour,
			Cost: cost, CountWhen: when, CostHeader: header}
	}
	limits := []enforce.Limit{
		tier("t-success", "GET /success", 2, enforce.CountSuccess, ""),
		tier("t-error", "GET /error", 3, enforce.CountError, ""),
		tier("t-tokens", "GET /tokens", 4, "", "X-Tokens-Used"),
		tier("t-small", "GET /small", 1, enforce.CountSuccess, ""),
	}
	if algo == enforce.LeakyBucket {
		for i := range limits {
			// Remaining is then the limit less what is used, as for the
			// other algorithms (a leaky bucket passes burst+1 at once).
			limits[i].Burst = limit - 1
		}
	}
	res := &mwResolver{Keys: map[string]enforce.Caller{"sk_settle": {Subject: "dev:9", Key: "key:90", Plan: "p", Limits: limits}}}
	mw := httplimit.NewMiddleware(store, res, httplimit.Options{})
	mux := http.NewServeMux()
	serve := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v := r.URL.Query().Get("tokens"); v != "" {
			w.Header().Set("X-Tokens-Used", v)
		}
		code, _ := strconv.Atoi(r.URL.Query().Get("status"))
		w.WriteHeader(code)
	})
	for _, l := range limits {
		mux.Handle(l.Route, mw.Wrap(serve))
	}
	ask := func(path string) *httptest.ResponseRecorder {
		t.Helper()
		r := httptest.NewRequest("GET", path, nil)
		r.Header.Set("Authorization", "Bearer sk_settle")
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		return w
	}
	used := func(l enforce.Limit) int64 {
		t.Helper()
		d, err := store.Peek(context.Background(), enforce.Request{Subject: "dev:9", Key: "key:90", Limits: []enforce.Limit{l}})
		if err != nil {
			t.Fatal(err)
		}
		return limit - d.Layers[0].Remaining
	}

	// Counting successes: 3 errors and 2 successes of cost 2 leave 4 used.
	for _, s := range []int{500, 404, 200, 503, 302} {
		w := ask("/success?status=" + strconv.Itoa(s))
		if w.Code != s {
			t.Fatalf("status %d answered %d", s, w.Code)
		}
		if got := w.Header().Get(httplimit.HeaderCount); got != `"t-success";when=success` {
			t.Errorf("%s = %q", httplimit.HeaderCount, got)
		}
	}
	if got := used(limits[0]); got != 4 {
		t.Errorf("count_when=success: %d used after 2 successes of cost 2, want 4", got)
	}
	// Counting errors: 2 errors of 5 of cost 3 leave 6 used.
	for _, s := range []int{200, 201, 429, 500, 101} {
		ask("/error?status=" + strconv.Itoa(s))
	}
	if got := used(limits[1]); got != 6 {
		t.Errorf("count_when=error: %d used after 2 errors of cost 3, want 6", got)
	}
	// A cost header: 10 (4 charged up front, 6 more), 0 (4 given back),
	// none and a malformed one (4 each, as charged): 18 used.
	for _, q := range []string{"tokens=10&status=200", "tokens=0&status=200", "status=200", "tokens=lots&status=200"} {
		if w := ask("/tokens?" + q); w.Header().Get(httplimit.HeaderCount) != `"t-tokens";cost-header="x-tokens-used"` {
			t.Errorf("%s = %q", httplimit.HeaderCount, w.Header().Get(httplimit.HeaderCount))
		}
	}
	if got := used(limits[2]); got != 18 {
		t.Errorf("cost_header: %d used after costs of 10, 0, none and malformed (4 each), want 18", got)
	}
	// Charged past the limit: the next request is refused by the
	// middleware, and its 429 gives nothing back and charges nothing.
	ask("/tokens?tokens=200&status=200")
	if got := used(limits[2]); got != limit {
		t.Errorf("after a charge of 200: %d used, want the limit (%d)", got, limit)
	}
	if w := ask("/tokens?tokens=0&status=200"); w.Code != http.StatusTooManyRequests {
		t.Errorf("over the limit after a charge: answered %d, want 429", w.Code)
	}
	// The small tier spends its whole limit on errors and stays free.
	for range limit + 5 {
		if w := ask("/small?status=500"); w.Code != http.StatusInternalServerError {
			t.Fatalf("an error-only run was refused: %d", w.Code)
		}
	}
	if got := used(limits[3]); got != 0 {
		t.Errorf("count_when=success after %d errors: %d used, want 0", limit+5, got)
	}
}
