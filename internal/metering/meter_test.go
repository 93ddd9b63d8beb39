package metering_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/history"
	"github.com/sluicehq/sluice/internal/metering"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/requestlog"
	"github.com/sluicehq/sluice/internal/snapshot"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/users"
)

const (
	search = "GET /api/search"
	items  = "GET /api/items/{id}"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

func scalar(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// world is a plan "pro" with a plan-wide tier "all" and a per-key tier
// "search" of 5 an hour, two developers with keys, and the engine, the
// usage history and the request log, all on one clock.
type world struct {
	pool       *pgxpool.Pool
	clk        *clock
	snap       *snapshot.Snapshot
	store      *memstore.Store
	hist       *history.Recorder
	log        *requestlog.Writer
	ann, bob   users.User
	annA, annB apikeys.Key
	bobKey     apikeys.Key
}

func newWorld(t *testing.T, at time.Time) *world {
	t.Helper()
	ctx := context.Background()
	pool := testenv.Postgres(t)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	ps := plans.NewService(pool, []string{search, items}, logger)
	pro, err := ps.Create(ctx, "test", plans.PlanInput{Slug: "pro", Name: "Pro", Limits: []plans.LimitInput{
		{Name: "all", Algorithm: "fixed_window", Limit: 1000, WindowSeconds: 86400},
		{Name: "search", Route: search, Algorithm: "fixed_window", Limit: 5, WindowSeconds: 3600},
		{Name: "trial", Algorithm: "fixed_window", Mode: "shadow", Limit: 1, WindowSeconds: 60},
	}})
	if err != nil {
		t.Fatal(err)
	}
	us := users.NewRepo(pool)
	ks := apikeys.NewService(pool, []string{search, items}, logger)
	w := &world{pool: pool, clk: &clock{t: at}}
	mk := func(email string) users.User {
		u, err := us.Create(ctx, users.NewUser{Email: email, Password: "correct horse battery", Role: users.RoleDeveloper, PlanID: &pro.ID})
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	key := func(u users.User, name string) apikeys.Key {
		k, _, err := ks.Create(ctx, "test", apikeys.NewKey{UserID: u.ID, Name: name})
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	w.ann, w.bob = mk("ann@example.com"), mk("bob@example.com")
	w.annA, w.annB, w.bobKey = key(w.ann, "a"), key(w.ann, "b"), key(w.bob, "bob")
	if w.snap, err = snapshot.Load(ctx, pool); err != nil {
		t.Fatal(err)
	}
	w.store = memstore.New(memstore.Options{Now: w.clk.Now})
	w.hist = history.NewRecorder(pool, history.Options{Now: w.clk.Now})
	w.log = requestlog.NewWriter(pool, requestlog.Options{AdmitSample: 1, Now: w.clk.Now})
	return w
}

// call decides n requests of key on route as the engine does, telling the
// usage history and the request log of each, and returns how many were
// admitted.
func (w *world) call(t *testing.T, key apikeys.Key, route string, n int) int64 {
	t.Helper()
	caller, ok := w.snap.KeyCaller(key.ID)
	if !ok {
		t.Fatal("key not in the snapshot")
	}
	var limits []enforce.Limit
	for _, l := range caller.Limits {
		if l.Route == "" || l.Route == route {
			limits = append(limits, l)
		}
	}
	var admitted int64
	for range n {
		d, err := w.store.Allow(context.Background(), enforce.Request{Subject: caller.Subject, Key: caller.Key, Route: route, Limits: limits})
		if err != nil {
			t.Fatal(err)
		}
		e := requestlog.Entry{At: w.clk.Now(), WayIn: requestlog.WayMiddleware, Plan: caller.Plan, Route: route,
			KeyID: caller.KeyID, UserID: caller.UserID, Outcome: requestlog.Admitted, Status: 200}
		if !d.Visible().Allowed {
			e.Outcome, e.Status, e.Layer = requestlog.Rejected, 429, d.Binding().Limit.Name
		} else {
			admitted++
		}
		w.hist.RecordDecision(caller, route, 1, d.Visible().Allowed)
		w.log.Log(e)
	}
	return admitted
}

func (w *world) flush(t *testing.T) {
	t.Helper()
	for _, f := range []func(context.Context) error{w.hist.Flush, w.log.Flush} {
		if err := f(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// recorded is the sum of requests of the records of one developer and tier.
func recorded(t *testing.T, pool *pgxpool.Pool, user int64, tier string) int64 {
	t.Helper()
	return scalar(t, pool, `SELECT COALESCE(sum(requests), 0) FROM meter_records WHERE user_id = $1 AND tier = $2`, user, tier)
}

func TestRecordsEqualTheRequestLogTheHistoryAndTheEnforcedCounts(t *testing.T) {
	day := time.Date(2026, 3, 10, 0, 0, 0, 0, time.UTC)
	w := newWorld(t, day.Add(10*time.Hour))
	ctx := context.Background()
	var annSearch, annItems int64
	annSearch += w.call(t, w.annA, search, 8) // 5 admitted, 3 rejected by the per-key tier
	annSearch += w.call(t, w.annB, search, 2)
	annItems += w.call(t, w.annA, items, 4)
	bobAll := w.call(t, w.bobKey, items, 3)
	if annSearch != 7 || annItems != 4 || bobAll != 3 {
		t.Fatalf("admitted: ann %d searches and %d items, bob %d", annSearch, annItems, bobAll)
	}
	w.flush(t)
	// The enforced count of a fixed window is its limit minus what remains.
	enforced := func(u users.User, k apikeys.Key, tier string) int64 {
		caller, _ := w.snap.KeyCaller(k.ID)
		for _, l := range caller.Limits {
			if l.Name == tier {
				d, err := w.store.Peek(ctx, enforce.Request{Subject: caller.Subject, Key: caller.Key, Limits: []enforce.Limit{l}})
				if err != nil {
					t.Fatal(err)
				}
				return l.Limit - d.Layers[0].Remaining
			}
		}
		t.Fatalf("no tier %s", tier)
		return 0
	}
	// Read while the windows still hold the day's requests.
	annAll, annSearchEnforced := enforced(w.ann, w.annA, "pro-all"), enforced(w.ann, w.annA, "pro-search")+enforced(w.ann, w.annB, "pro-search")
	bobEnforced := enforced(w.bob, w.bobKey, "pro-all")

	m := metering.NewMeter(w.pool, metering.Options{Period: metering.Day, Now: w.clk.Now})
	// The day is not over: nothing is closed.
	if n, err := m.Close(ctx); err != nil || n != 0 {
		t.Fatalf("Close during the day: %d records, %v", n, err)
	}
	w.clk.Set(day.Add(24*time.Hour + 3*time.Minute))
	n, err := m.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// ann: every request, all, search; bob: every request, all.
	if n != 5 {
		t.Errorf("%d records, want 5", n)
	}
	logAdmitted := func(user int64, route string) int64 {
		return scalar(t, w.pool, `SELECT COALESCE(sum(weight), 0) FROM request_log WHERE user_id = $1 AND outcome = 'admitted' AND ($2 = '' OR route = $2)`, user, route)
	}
	histAdmitted := func(user int64, route string) int64 {
		return scalar(t, w.pool, `SELECT COALESCE(sum(admitted), 0) FROM usage_hours WHERE user_id = $1 AND ($2 = '' OR route = $2)`, user, route)
	}
	for _, tt := range []struct {
		name     string
		user     int64
		tier     string
		route    string
		want     int64
		enforced int64
	}{
		{"AnnEveryRequest", w.ann.ID, metering.AllTiers, "", annSearch + annItems, -1},
		{"AnnPlanWideTier", w.ann.ID, "all", "", annSearch + annItems, annAll},
		// The search tier counts per key: both keys' windows together.
		{"AnnSearchTier", w.ann.ID, "search", search, annSearch, annSearchEnforced},
		{"BobPlanWideTier", w.bob.ID, "all", "", bobAll, bobEnforced},
		{"BobNoSearch", w.bob.ID, "search", search, 0, -1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := recorded(t, w.pool, tt.user, tt.tier)
			if got != tt.want {
				t.Errorf("records sum to %d, want %d", got, tt.want)
			}
			if l := logAdmitted(tt.user, tt.route); l != got {
				t.Errorf("records %d, request log %d", got, l)
			}
			if h := histAdmitted(tt.user, tt.route); h != got {
				t.Errorf("records %d, usage history %d", got, h)
			}
			if tt.enforced >= 0 && tt.enforced != got {
				t.Errorf("records %d, the engine counted %d", got, tt.enforced)
			}
		})
	}
	if n := scalar(t, w.pool, `SELECT count(*) FROM meter_records WHERE tier = 'trial'`); n != 0 {
		t.Errorf("%d records of a shadow tier", n)
	}
	if n := scalar(t, w.pool, `SELECT sum(rejected) FROM meter_records WHERE user_id = $1 AND tier = 'search'`, w.ann.ID); n != 3 {
		t.Errorf("ann's search records hold %d rejections, want 3", n)
	}

	t.Run("LateRequestsMakeANewRevision", func(t *testing.T) {
		// An instance flushes two requests of the closed day late.
		late := history.NewRecorder(w.pool, history.Options{Now: func() time.Time { return day.Add(23 * time.Hour) }})
		caller, _ := w.snap.KeyCaller(w.bobKey.ID)
		late.RecordDecision(caller, items, 2, true)
		if err := late.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		// Not yet an hour after the day's end: the day is not read again.
		if n, err := m.Close(ctx); err != nil || n != 0 {
			t.Fatalf("before the recheck: %d records, %v", n, err)
		}
		w.clk.Set(day.Add(25*time.Hour + time.Minute))
		if n, err := m.Close(ctx); err != nil || n != 2 {
			t.Fatalf("the recheck wrote %d records (%v), want bob's every-request and all records", n, err)
		}
		var rev int
		var req int64
		var id string
		if err := w.pool.QueryRow(ctx, `SELECT revision, requests, id FROM meter_records WHERE user_id = $1 AND tier = 'all' ORDER BY revision DESC LIMIT 1`, w.bob.ID).Scan(&rev, &req, &id); err != nil {
			t.Fatal(err)
		}
		if rev != 1 || req != 2 || id != metering.RecordID(w.bob.ID, "pro", "all", day, 1) {
			t.Errorf("late record: revision %d, %d requests, id %s; want revision 1 adding 2, id from its key", rev, req, id)
		}
		if got, h := recorded(t, w.pool, w.bob.ID, "all"), histAdmitted(w.bob.ID, ""); got != bobAll+2 || got != h {
			t.Errorf("bob's records sum to %d, the history %d, want %d", got, h, bobAll+2)
		}
		w.clk.Set(day.Add(30 * time.Hour))
		if n, err := m.Close(ctx); err != nil || n != 0 {
			t.Errorf("a third read: %d records, %v; want none (a day is read twice)", n, err)
		}
	})
}

func TestTwoMetersWriteEachRecordOnce(t *testing.T) {
	day := time.Date(2026, 3, 10, 0, 0, 0, 0, time.UTC)
	w := newWorld(t, day.Add(time.Hour))
	w.call(t, w.annA, items, 6)
	w.flush(t)
	w.clk.Set(day.Add(24*time.Hour + 5*time.Minute))
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := metering.NewMeter(w.pool, metering.Options{Period: metering.Hour, Now: w.clk.Now})
			if _, err := m.Close(context.Background()); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if got := recorded(t, w.pool, w.ann.ID, metering.AllTiers); got != 6 {
		t.Errorf("records sum to %d, want 6: each written once", got)
	}
	if n := scalar(t, w.pool, `SELECT count(*) FROM meter_records WHERE period_start = $1`, day.Add(time.Hour)); n != 2 {
		t.Errorf("%d records of the hour, want 2 (every request, all)", n)
	}
}
