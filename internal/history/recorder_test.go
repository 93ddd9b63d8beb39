package history_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/httplimit"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/gateway"
	"github.com/sluicehq/sluice/internal/history"
	"github.com/sluicehq/sluice/internal/services"
	"github.com/sluicehq/sluice/internal/testenv"
)

// clock is a settable clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

func sum(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) (admitted, rejected int64) {
	t.Helper()
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&admitted, &rejected); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return admitted, rejected
}

func dev(user, key int64, plan string) enforce.Caller {
	return enforce.Caller{Subject: enforce.DeveloperSubject(user), Key: enforce.KeyScope(key), KeyID: key, UserID: user, Plan: plan}
}

func TestTwoRecordersAddUpExactly(t *testing.T) {
	// Two instances tally the same rows concurrently and flush several
	// times each; the stored minutes and hours are the exact sums.
	pool := testenv.Postgres(t)
	ctx := context.Background()
	clk := &clock{t: time.Date(2026, 12, 1, 9, 58, 30, 0, time.UTC)}
	a := history.NewRecorder(pool, history.Options{Now: clk.Now})
	b := history.NewRecorder(pool, history.Options{Now: clk.Now})
	callers := []enforce.Caller{dev(1, 10, "free"), dev(1, 11, "free"), dev(2, 20, "pro"),
		{Subject: "ip:192.0.2.7", Plan: "anonymous"}, {Subject: "ip:192.0.2.9", Plan: "anonymous"}}
	const rounds, per = 4, 250
	for round := range rounds {
		if round == 2 {
			clk.Set(clk.Now().Add(2 * time.Minute)) // into the next hour
		}
		var wg sync.WaitGroup
		for _, r := range []*history.Recorder{a, b} {
			for _, c := range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range per {
						r.RecordDecision(c, "GET /api/search", 1, i%5 != 0)
					}
				}()
			}
		}
		wg.Wait()
		var fw sync.WaitGroup
		for _, r := range []*history.Recorder{a, b} {
			fw.Add(1)
			go func() {
				defer fw.Done()
				if err := r.Flush(ctx); err != nil {
					t.Error(err)
				}
			}()
		}
		fw.Wait()
	}
	const total = rounds * 2 * per
	wantA, wantR := int64(total*4/5), int64(total/5)
	for _, tc := range []struct {
		name, sql string
		args      []any
		a, r      int64
	}{
		{"developer 1, both keys, minutes", `SELECT sum(admitted), sum(rejected) FROM usage_minutes WHERE user_id = $1`, []any{1}, 2 * wantA, 2 * wantR},
		{"key 20, hours", `SELECT sum(admitted), sum(rejected) FROM usage_hours WHERE key_id = $1`, []any{20}, wantA, wantR},
		{"anonymous block, minutes", `SELECT sum(admitted), sum(rejected) FROM usage_minutes WHERE address = $1`, []any{"192.0.2.0/24"}, 2 * wantA, 2 * wantR},
		{"first hour", `SELECT sum(admitted), sum(rejected) FROM usage_hours WHERE hour = $1`, []any{time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}, 5 * wantA / 2, 5 * wantR / 2},
		{"second hour's minutes", `SELECT sum(admitted), sum(rejected) FROM usage_minutes WHERE minute = $1`, []any{time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}, 5 * wantA / 2, 5 * wantR / 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gotA, gotR := sum(t, pool, tc.sql, tc.args...)
			if gotA != tc.a || gotR != tc.r {
				t.Errorf("admitted %d rejected %d, want %d and %d", gotA, gotR, tc.a, tc.r)
			}
		})
	}
	var rows int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM usage_minutes WHERE address <> ''`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 2 { // one /24 in each of two minutes
		t.Errorf("%d anonymous minute rows, want 2 (both addresses in one /24 per minute)", rows)
	}
}

func TestOneCallersRunAcrossAFlushAddsUpExactly(t *testing.T) {
	// The recorder remembers the latest decision's row; a flush between
	// two decisions of one caller in one minute must not leave the second
	// counted in the row the flush took away.
	pool := testenv.Postgres(t)
	ctx := context.Background()
	clk := &clock{t: time.Date(2026, 12, 1, 9, 30, 0, 0, time.UTC)}
	r := history.NewRecorder(pool, history.Options{Now: clk.Now})
	caller := dev(3, 30, "pro")
	for flush := range 3 {
		for range 10 {
			r.RecordDecision(caller, "GET /api/search", 1, true)
		}
		r.RecordDecision(caller, "GET /api/search", 2, false)
		if err := r.Flush(ctx); err != nil {
			t.Fatalf("flush %d: %v", flush, err)
		}
	}
	gotA, gotR := sum(t, pool, `SELECT sum(admitted), sum(rejected) FROM usage_minutes WHERE key_id = $1`, 30)
	if gotA != 30 || gotR != 6 {
		t.Errorf("admitted %d rejected %d, want 30 and 6", gotA, gotR)
	}
}

func TestRecorderKeepsTheTallyThroughAnOutage(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	clk := &clock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	reg := prometheus.NewRegistry()
	r := history.NewRecorder(pool, history.Options{Now: clk.Now, MaxPending: 2, Registerer: reg})
	for range 7 {
		r.RecordDecision(dev(3, 30, "free"), "GET /api/items/{id}", 1, true)
	}
	// The table goes away: the flush fails and the tally is kept.
	if _, err := pool.Exec(ctx, `ALTER TABLE usage_minutes RENAME TO usage_minutes_away`); err != nil {
		t.Fatal(err)
	}
	if err := r.Flush(ctx); err == nil {
		t.Fatal("flush succeeded without its table")
	}
	r.RecordDecision(dev(3, 30, "free"), "GET /api/items/{id}", 1, false) // same row: kept
	r.RecordDecision(dev(4, 40, "free"), "GET /api/items/{id}", 1, true)  // a second row: fits
	if err := r.Flush(ctx); err == nil {
		t.Fatal("flush succeeded without its table")
	}
	r.RecordDecision(dev(5, 50, "free"), "GET /api/items/{id}", 1, true) // a third: over MaxPending
	r.RecordDecision(dev(5, 50, "free"), "GET /api/items/{id}", 1, false)
	if err := r.Flush(ctx); err == nil {
		t.Fatal("third flush succeeded without its table")
	}
	if _, err := pool.Exec(ctx, `ALTER TABLE usage_minutes_away RENAME TO usage_minutes`); err != nil {
		t.Fatal(err)
	}
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		user int64
		a, r int64
	}{{3, 7, 1}, {4, 1, 0}, {5, 0, 0}} {
		a, rj := sum(t, pool, `SELECT COALESCE(sum(admitted), 0), COALESCE(sum(rejected), 0) FROM usage_minutes WHERE user_id = $1`, tc.user)
		if a != tc.a || rj != tc.r {
			t.Errorf("developer %d: admitted %d rejected %d, want %d and %d", tc.user, a, rj, tc.a, tc.r)
		}
	}
	if got := counter(t, reg, "sluice_history_dropped_requests_total"); got != 2 {
		t.Errorf("dropped = %v, want 2 (developer 5's two requests)", got)
	}
}

func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			var v float64
			for _, m := range mf.GetMetric() {
				v += metricValue(m)
			}
			return v
		}
	}
	return 0
}

func metricValue(m *dto.Metric) float64 {
	if c := m.GetCounter(); c != nil {
		return c.GetValue()
	}
	return m.GetGauge().GetValue()
}

func TestPruneKeepsEachResolutionItsRetention(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, at := range []time.Time{now.Add(-25 * time.Hour), now.Add(-23 * time.Hour), now.Add(-91 * 24 * time.Hour), now.Add(-89 * 24 * time.Hour)} {
		if _, err := pool.Exec(ctx, `INSERT INTO usage_minutes VALUES ($1, 'free', '', 1, 1, '', 1, 0)`, at); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO usage_hours VALUES ($1, 'free', '', 1, 1, '', 1, 0)`, at); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO shadow_minutes VALUES ($1, 'free', 't', 1, 1, '', 1)`, at); err != nil {
			t.Fatal(err)
		}
	}
	if err := history.Prune(ctx, pool, now); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		table string
		want  int
	}{{"usage_minutes", 1}, {"usage_hours", 3}, {"shadow_minutes", 1}} {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+tc.table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != tc.want {
			t.Errorf("%s keeps %d rows, want %d", tc.table, n, tc.want)
		}
	}
}

func TestBlock(t *testing.T) {
	for in, want := range map[string]string{
		"ip:192.0.2.77":           "192.0.2.0/24",
		"ip:2001:db8:1:2::/64":    "2001:db8:1::/48",
		"ip:2001:db8:aa:bb:cc::1": "2001:db8:aa::/48",
		"ip:::ffff:198.51.100.3":  "198.51.100.0/24",
		"dev:3":                   "",
		"ip:":                     "",
		"ip:not-an-address":       "",
		"":                        "",
	} {
		if got := history.Block(in); got != want {
			t.Errorf("Block(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRecorderBoundsAnonymousAddresses(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	clk := &clock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	r := history.NewRecorder(pool, history.Options{Now: clk.Now, MaxAddresses: 3})
	for i := range 10 {
		r.RecordDecision(enforce.Caller{Subject: fmt.Sprintf("ip:10.%d.0.1", i), Plan: "anonymous"}, "", 1, true)
	}
	// Keyed traffic has no address block: it is no part of the anonymous
	// table, not even as "other addresses", filtered or not.
	for range 5 {
		r.RecordDecision(enforce.Caller{Subject: "dev:3", KeyID: 9, UserID: 3, Plan: "pro"}, "GET /api/search", 1, true)
	}
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	unfiltered, err := history.NewReader(pool).Top(ctx, history.Filter{}, history.ByAddress, history.Minute, clk.Now().Add(-time.Hour), clk.Now().Add(time.Minute), 10)
	if err != nil {
		t.Fatal(err)
	}
	var all int64
	for _, b := range unfiltered {
		all += b.Admitted
	}
	if all != 10 {
		t.Errorf("the address table of all traffic counts %d requests (%+v), want the 10 anonymous ones", all, unfiltered)
	}
	top, err := history.NewReader(pool).Top(ctx, history.Filter{Anonymous: true}, history.ByAddress, history.Minute, clk.Now().Add(-time.Hour), clk.Now().Add(time.Minute), 10)
	if err != nil {
		t.Fatal(err)
	}
	var blocks, total int64
	for _, b := range top {
		total += b.Admitted
		if b.Label == "other addresses" {
			if b.Admitted != 7 {
				t.Errorf("other addresses admitted %d, want 7", b.Admitted)
			}
			continue
		}
		blocks++
	}
	if blocks != 3 || total != 10 {
		t.Errorf("%d blocks, %d requests (%+v), want 3 blocks and 10 requests", blocks, total, top)
	}
}

// resolver is the smallest enforce.Resolver: fixed keys, one anonymous
// plan.
type resolver struct {
	keys map[string]enforce.Caller
	anon []enforce.Limit
}

func (r *resolver) ResolveKey(secret string) (enforce.Caller, error) {
	if c, ok := r.keys[secret]; ok {
		return c, nil
	}
	return enforce.Caller{}, enforce.ErrInvalidKey
}

func (r *resolver) Anonymous(ip netip.Addr) enforce.Caller {
	return enforce.Caller{Subject: "ip:" + ip.String(), Plan: "anonymous", Limits: r.anon}
}

func TestMiddlewareFeedsHistoryAndShadowExactly(t *testing.T) {
	// A shadow tier of 1 per hour on a busy route: the history holds every
	// decision, and the shadow rows exactly what the metric counts.
	pool := testenv.Postgres(t)
	ctx := context.Background()
	clk := &clock{t: time.Now().UTC()}
	rec := history.NewRecorder(pool, history.Options{Now: clk.Now})
	limits := []enforce.Limit{
		{Name: "free-global", Algorithm: enforce.FixedWindow, Limit: 1_000_000, Window: time.Hour},
		{Name: "free-trial", Route: "GET /busy", Algorithm: enforce.FixedWindow, Limit: 1, Window: time.Hour, Mode: enforce.ModeShadow},
	}
	res := &resolver{
		keys: map[string]enforce.Caller{"sk_a": {Subject: "dev:7", Key: "key:70", KeyID: 70, UserID: 7, Plan: "free", Limits: limits}},
		anon: []enforce.Limit{{Name: "anon-busy", Route: "GET /busy", Algorithm: enforce.FixedWindow, Limit: 5, Window: time.Hour}},
	}
	reg := prometheus.NewRegistry()
	mw := httplimit.NewMiddleware(memstore.New(memstore.Options{}), res, httplimit.Options{Registerer: reg, Shadow: rec, Record: rec})
	mux := http.NewServeMux()
	mux.Handle("GET /busy", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))

	const n, anon = 300, 12
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n+anon; i += 8 {
				req := httptest.NewRequest("GET", "/busy", nil)
				req.RemoteAddr = "198.51.100.4:1234"
				if i < n {
					req.Header.Set("Authorization", "Bearer sk_a")
				}
				mux.ServeHTTP(httptest.NewRecorder(), req)
			}
		}()
	}
	wg.Wait()
	if err := rec.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	q := history.NewReader(pool)
	from := clk.Now().Truncate(time.Minute).Add(-time.Hour)
	to := from.Add(61 * time.Minute)
	for _, tc := range []struct {
		name string
		f    history.Filter
		a, r int64
	}{
		{"the key", history.Filter{KeyID: 70}, n, 0},
		{"the developer on the route", history.Filter{UserID: 7, Route: "GET /busy"}, n, 0},
		{"the plan", history.Filter{Plan: "free"}, n, 0},
		{"anonymous", history.Filter{Anonymous: true}, 5, anon - 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pts, err := q.Series(ctx, tc.f, history.Minute, from, to)
			if err != nil {
				t.Fatal(err)
			}
			var a, r int64
			for _, p := range pts {
				a, r = a+p.Admitted, r+p.Rejected
			}
			if a != tc.a || r != tc.r || len(pts) != 61 {
				t.Errorf("admitted %d rejected %d in %d points, want %d, %d in 61", a, r, len(pts), tc.a, tc.r)
			}
		})
	}

	shadow, err := q.Shadow(ctx, "free", clk.Now().Add(time.Minute), 10)
	if err != nil {
		t.Fatal(err)
	}
	metric := counter(t, reg, "sluice_shadow_rejections_total")
	if len(shadow) != 1 || shadow[0].Tier != "free-trial" || shadow[0].UserID != 7 || shadow[0].KeyID != 70 ||
		float64(shadow[0].LastHour) != metric || shadow[0].LastDay != n-1 || metric != n-1 {
		t.Errorf("shadow rows %+v with metric %v, want one row for developer 7, key 70, %d in the hour and day", shadow, metric, n-1)
	}
}

func TestRecordDecisionAllocatesNothingForAKnownRow(t *testing.T) {
	clk := &clock{t: time.Date(2026, 12, 1, 12, 0, 30, 0, time.UTC)}
	r := history.NewRecorder(nil, history.Options{Now: clk.Now})
	key, anon := dev(1, 10, "free"), enforce.Caller{Subject: "ip:192.0.2.1", Plan: "anonymous"}
	r.RecordDecision(key, "GET /api/search", 1, true)
	r.RecordDecision(anon, "GET /api/search", 1, true)
	shadow := httplimit.ShadowRejection{Plan: "free", Tier: "t", Subject: key.Subject, Key: key.Key, At: clk.Now()}
	r.RecordShadow(shadow)
	if n := testing.AllocsPerRun(200, func() {
		r.RecordDecision(key, "GET /api/search", 1, true)
		r.RecordDecision(anon, "GET /api/search", 1, false)
		r.RecordShadow(shadow)
	}); n != 0 {
		t.Errorf("%v allocations per recorded request, want 0", n)
	}
}

func BenchmarkRecordDecision(b *testing.B) {
	r := history.NewRecorder(nil, history.Options{})
	callers := []enforce.Caller{dev(1, 10, "free"), dev(2, 20, "pro"), dev(3, 30, "pro"), {Subject: "ip:192.0.2.1", Plan: "anonymous"}}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			r.RecordDecision(callers[i%len(callers)], "GET /api/search", 1, true)
			i++
		}
	})
}

func TestGatewayWaysInFeedTheHistory(t *testing.T) {
	// /v1/check decides a gateway's request on the service's declared
	// route; an Envoy request with hits_addend 3 (EnforceHits) counts as 3.
	pool := testenv.Postgres(t)
	ctx := context.Background()
	rec := history.NewRecorder(pool, history.Options{})
	limits := []enforce.Limit{{Name: "orders", Route: "GET /orders/{id}", Algorithm: enforce.FixedWindow, Limit: 4, Window: time.Hour}}
	res := &resolver{keys: map[string]enforce.Caller{"sk_g": {Subject: "dev:8", Key: "key:80", KeyID: 80, UserID: 8, Plan: "partner", Limits: limits}}}
	mw := httplimit.NewMiddleware(memstore.New(memstore.Options{}), res, httplimit.Options{Record: rec})
	cat, err := services.NewCatalog([]services.Service{{Slug: "shop", Name: "Shop", Routes: []string{"GET /orders/{id}"}}})
	if err != nil {
		t.Fatal(err)
	}
	check := gateway.NewCheck(gateway.CatalogFunc(func() *services.Catalog { return cat }), mw, nil)
	statuses := map[int]int{}
	for i := range 6 {
		req := httptest.NewRequest("GET", gateway.CheckPath, nil)
		req.Header.Set("Authorization", "Bearer sk_g")
		req.Header.Set("X-Forwarded-Method", "GET")
		req.Header.Set("X-Forwarded-Uri", "/orders/"+strconv.Itoa(i))
		w := httptest.NewRecorder()
		check.ServeHTTP(w, req)
		statuses[w.Code]++
	}
	if statuses[http.StatusOK] != 4 || statuses[http.StatusTooManyRequests] != 2 {
		t.Fatalf("statuses %v, want 4 admitted and 2 rejected", statuses)
	}
	// Another subject, through EnforceHits: one decision of 3 requests.
	res.keys["sk_h"] = enforce.Caller{Subject: "dev:9", Key: "key:90", KeyID: 90, UserID: 9, Plan: "partner", Limits: limits}
	req := httptest.NewRequest("GET", "/", nil)
	req.Header.Set("Authorization", "Bearer sk_h")
	mw.EnforceHits(httptest.NewRecorder(), req, "GET /orders/{id}", 3, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	if err := rec.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		user int64
		a, r int64
	}{{8, 4, 2}, {9, 3, 0}} {
		a, r := sum(t, pool, `SELECT sum(admitted), sum(rejected) FROM usage_minutes WHERE user_id = $1 AND route = 'GET /orders/{id}' AND plan = 'partner'`, tc.user)
		if a != tc.a || r != tc.r {
			t.Errorf("developer %d: admitted %d rejected %d, want %d and %d", tc.user, a, r, tc.a, tc.r)
		}
	}
}

// BenchmarkMiddlewareRecord is one decided request through the middleware
// (memory store, a key with one limit) without and with the history
// recorder, to be run side by side (-count=N interleaves them).
func BenchmarkMiddlewareRecord(b *testing.B) {
	limits := []enforce.Limit{{Name: "global", Algorithm: enforce.FixedWindow, Limit: 1 << 40, Window: time.Hour}}
	res := &resolver{keys: map[string]enforce.Caller{"sk_b": {Subject: "dev:1", Key: "key:10", KeyID: 10, UserID: 1, Plan: "free", Limits: limits}}}
	for _, tc := range []struct {
		name string
		rec  httplimit.DecisionRecorder
	}{{"without", nil}, {"with", history.NewRecorder(nil, history.Options{})}} {
		b.Run(tc.name, func(b *testing.B) {
			mw := httplimit.NewMiddleware(memstore.New(memstore.Options{}), res, httplimit.Options{Record: tc.rec})
			h := mw.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			req := httptest.NewRequest("GET", "/api/search", nil)
			req.Header.Set("Authorization", "Bearer sk_b")
			w := httptest.NewRecorder()
			b.ReportAllocs()
			for b.Loop() {
				h.ServeHTTP(w, req)
			}
		})
	}
}
