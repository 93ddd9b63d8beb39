package metering_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/httplimit"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/history"
	"github.com/sluicehq/sluice/internal/metering"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/requestlog"
	"github.com/sluicehq/sluice/internal/snapshot"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/users"
)

// keyResolver resolves one key's secret to its caller in a snapshot.
type keyResolver struct {
	secret string
	caller enforce.Caller
}

func (k keyResolver) ResolveKey(secret string) (enforce.Caller, error) {
	if secret != k.secret {
		return enforce.Caller{}, enforce.ErrInvalidKey
	}
	return k.caller, nil
}

func (k keyResolver) Anonymous(netip.Addr) enforce.Caller { return enforce.Caller{} }

// TestCostUnitsEqualTheRequestLogAndTheEnforcedCounts runs requests with
// costs through the middleware, as the portal wires it (the usage history
// records the decisions and the settlements, the request log every
// decision), and closes the day: each tier's record holds the cost units
// the engine counted, as settled after the responses, and the requests the
// request log holds.
//
//   - "all", plan-wide, cost 1: one unit a request;
//   - "search", cost 3, counting successes only: 3 units a 1xx-3xx
//     response, none for an error;
//   - "tokens", cost 2, from the X-Tokens-Used header: what the header
//     says, 2 when it says nothing.
func TestCostUnitsEqualTheRequestLogAndTheEnforcedCounts(t *testing.T) {
	day := time.Date(2026, 3, 10, 0, 0, 0, 0, time.UTC)
	clk := &clock{t: day.Add(10 * time.Hour)}
	ctx := context.Background()
	pool := testenv.Postgres(t)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	ps := plans.NewService(pool, []string{search, items}, logger)
	pro, err := ps.Create(ctx, "test", plans.PlanInput{Slug: "pro", Name: "Pro", Limits: []plans.LimitInput{
		{Name: "all", Algorithm: "fixed_window", Limit: 1000, WindowSeconds: 86400},
		{Name: "search", Route: search, Algorithm: "fixed_window", Limit: 1000, WindowSeconds: 86400, Cost: 3, CountWhen: "success"},
		{Name: "tokens", Route: items, Algorithm: "fixed_window", Limit: 1000, WindowSeconds: 86400, Cost: 2, CostHeader: "X-Tokens-Used"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ann, err := users.NewRepo(pool).Create(ctx, users.NewUser{Email: "ann@example.com", Password: "correct horse battery",
		Role: users.RoleDeveloper, PlanID: &pro.ID})
	if err != nil {
		t.Fatal(err)
	}
	key, secret, err := apikeys.NewService(pool, []string{search, items}, logger).Create(ctx, "test", apikeys.NewKey{UserID: ann.ID, Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := snapshot.Load(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	caller, ok := snap.KeyCaller(key.ID)
	if !ok {
		t.Fatal("key not in the snapshot")
	}
	store := memstore.New(memstore.Options{Now: clk.Now})
	hist := history.NewRecorder(pool, history.Options{Now: clk.Now})
	reqlog := requestlog.NewWriter(pool, requestlog.Options{AdmitSample: 1, Now: clk.Now})
	mw := httplimit.NewMiddleware(store, keyResolver{secret, caller}, httplimit.Options{
		Now: clk.Now, Record: hist, Settled: hist, RequestLog: reqlog})
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v := r.URL.Query().Get("tokens"); v != "" {
			w.Header().Set("X-Tokens-Used", v)
		}
		status, _ := strconv.Atoi(r.URL.Query().Get("status"))
		w.WriteHeader(max(status, http.StatusOK))
	})
	mux := http.NewServeMux()
	mux.Handle(search, mw.Wrap(api))
	mux.Handle(items, mw.Wrap(api))
	send := func(path string) {
		r := httptest.NewRequest("GET", path, nil)
		r.Header.Set("Authorization", "Bearer "+secret)
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		if w.Code == http.StatusTooManyRequests {
			t.Fatalf("%s refused", path)
		}
	}
	// search: 4 successes, 3 errors (3 units each success: 12).
	for _, s := range []int{200, 500, 200, 404, 302, 200, 503} {
		send("/api/search?status=" + strconv.Itoa(s))
	}
	// items: 40 + 0 + 2 (no header) + 7 + 2 (malformed) = 51 units.
	for _, q := range []string{"tokens=40", "tokens=0", "", "tokens=7", "tokens=many"} {
		send("/api/items/1?" + q)
	}
	for _, f := range []func(context.Context) error{hist.Flush, reqlog.Flush} {
		if err := f(ctx); err != nil {
			t.Fatal(err)
		}
	}
	enforced := func(tier string) int64 {
		for _, l := range caller.Limits {
			if l.Name == tier {
				d, err := store.Peek(ctx, enforce.Request{Subject: caller.Subject, Key: caller.Key, Limits: []enforce.Limit{l}})
				if err != nil {
					t.Fatal(err)
				}
				return l.Limit - d.Layers[0].Remaining
			}
		}
		t.Fatalf("no tier %s", tier)
		return 0
	}
	counted := map[string]int64{"all": enforced("pro-all"), "search": enforced("pro-search"), "tokens": enforced("pro-tokens")}

	clk.Set(day.Add(24*time.Hour + 3*time.Minute))
	if _, err := metering.NewMeter(pool, metering.Options{Period: metering.Day, Now: clk.Now}).Close(ctx); err != nil {
		t.Fatal(err)
	}
	sum := func(sql string, args ...any) int64 { return scalar(t, pool, sql, args...) }
	logRows := func(route, cond string) int64 {
		return sum(`SELECT COALESCE(sum(weight), 0) FROM request_log WHERE user_id = $1 AND outcome = 'admitted' AND ($2 = '' OR route = $2) AND `+cond, ann.ID, route)
	}
	for _, tt := range []struct {
		tier             string
		units, requests  int64
		logUnits, logReq int64 // from the request log: -1 where it cannot say
	}{
		{metering.AllTiers, 12, 12, logRows("", "true"), logRows("", "true")},
		{"all", 12, 12, logRows("", "true"), logRows("", "true")},
		{"search", 12, 7, 3 * logRows(search, "status < 400"), logRows(search, "true")},
		{"tokens", 51, 5, -1, logRows(items, "true")},
	} {
		t.Run("Tier"+tt.tier, func(t *testing.T) {
			units := sum(`SELECT COALESCE(sum(units), 0) FROM meter_records WHERE user_id = $1 AND tier = $2`, ann.ID, tt.tier)
			requests := sum(`SELECT COALESCE(sum(requests), 0) FROM meter_records WHERE user_id = $1 AND tier = $2`, ann.ID, tt.tier)
			if units != tt.units || requests != tt.requests {
				t.Errorf("records: %d units, %d requests; want %d and %d", units, requests, tt.units, tt.requests)
			}
			if c, ok := counted[tt.tier]; ok && c != units {
				t.Errorf("records %d units, the engine counted %d", units, c)
			}
			if tt.logUnits >= 0 && tt.logUnits != units {
				t.Errorf("records %d units, the request log says %d", units, tt.logUnits)
			}
			if tt.logReq != requests {
				t.Errorf("records %d requests, the request log %d", requests, tt.logReq)
			}
		})
	}
}
