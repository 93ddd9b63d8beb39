package analytics_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluicehq/sluice/internal/analytics"
	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/requestlog"
	"github.com/sluicehq/sluice/internal/snapshot"
	"github.com/sluicehq/sluice/internal/testenv"
)

var routes = []string{"GET /api/search", "GET /api/items/{id}"}

func gauge(t *testing.T, reg *prometheus.Registry, name, plan, tier string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label(m, "plan") == plan && label(m, "tier") == tier {
				return m.GetGauge().GetValue()
			}
		}
	}
	t.Errorf("no %s{plan=%q,tier=%q}", name, plan, tier)
	return -1
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func TestHeadroomAndTierGaugesReadTheEngine(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	ps := plans.NewService(pool, routes, logger)
	ks := apikeys.NewService(pool, routes, logger)
	pro, err := ps.Create(ctx, "test", plans.PlanInput{Slug: "pro", Name: "Pro", Limits: []plans.LimitInput{
		{Name: "search", Route: "GET /api/search", Algorithm: "fixed_window", Limit: 10, WindowSeconds: 3600},
		{Name: "burst", Algorithm: "token_bucket", Limit: 100, WindowSeconds: 60, Burst: 20},
		{Name: "trial", Algorithm: "fixed_window", Mode: "shadow", Limit: 1, WindowSeconds: 60},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var keys []apikeys.Key
	for i, email := range []string{"heavy@example.com", "light@example.com", "idle@example.com"} {
		var uid int64
		if err := pool.QueryRow(ctx, `INSERT INTO users (email, password_hash, role) VALUES ($1, 'x', 'developer') RETURNING id`, email).Scan(&uid); err != nil {
			t.Fatal(err)
		}
		k, _, err := ks.Create(ctx, "test", apikeys.NewKey{UserID: uid, Name: "key" + string(rune('A'+i)), PlanID: &pro.ID})
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	snap, err := snapshot.Load(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	store := memstore.New(memstore.Options{Now: func() time.Time { return now }})
	rollup := analytics.NewRollup(pool, analytics.Options{})
	// The heavy key searches 9 times (9 of 10: near the limit), the light
	// one twice; the idle key calls nothing today.
	for i, n := range []int{9, 2} {
		caller, ok := snap.KeyCaller(keys[i].ID)
		if !ok {
			t.Fatal("key not in the snapshot")
		}
		for range n {
			d, err := store.Allow(ctx, enforce.Request{Subject: caller.Subject, Key: caller.Key, Route: "GET /api/search", Limits: caller.Limits})
			if err != nil || !d.Allowed {
				t.Fatalf("allow: %+v %v", d, err)
			}
			e := requestlog.Entry{At: now, Outcome: requestlog.Admitted, Plan: "pro", Route: "GET /api/search", KeyID: keys[i].ID, UserID: keys[i].UserID, Status: 200}
			rollup.Observe(&e)
		}
	}
	if err := rollup.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	h := analytics.NewHeadroom(analytics.NewReader(pool), store, func() analytics.Snapshot { return snap })
	heavy, err := h.Heaviest(ctx, now, []string{"pro", "free"}, 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(heavy) != 1 || heavy[0].Plan != "pro" || len(heavy[0].Keys) != 2 {
		t.Fatalf("heaviest %+v, want pro with its 2 keys of the day", heavy)
	}
	top := heavy[0].Keys[0]
	if top.KeyID != keys[0].ID || top.Label != "keyA (heavy@example.com)" || top.Requests != 9 || top.Max != 90 {
		t.Errorf("heaviest key %+v, want keyA with 9 requests at 90 %%", top)
	}
	uses := map[string]analytics.TierUse{}
	for _, u := range top.Tiers {
		uses[u.Tier] = u
	}
	if u := uses["pro-search"]; u.Used != 9 || u.Of != 10 || u.Percent() != 90 {
		t.Errorf("search use %+v, want 9 of 10", u)
	}
	if u := uses["pro-burst"]; u.Used != 9 || u.Of != 20 {
		t.Errorf("burst use %+v, want the 9 tokens the key's developer spent of the burst of 20", u)
	}
	if _, ok := uses["pro-trial"]; ok {
		t.Error("a shadow tier is shown")
	}

	reg := prometheus.NewRegistry()
	g := analytics.NewTierGauges(h, 10, reg, logger)
	if err := g.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, tier string
		want       float64
	}{
		{"sluice_tier_limit", "search", 10}, {"sluice_tier_used", "search", 9}, {"sluice_tier_near_limit_subjects", "search", 1},
		{"sluice_tier_limit", "burst", 20}, {"sluice_tier_used", "burst", 9}, {"sluice_tier_near_limit_subjects", "burst", 0},
	} {
		if got := gauge(t, reg, tt.name, "pro", tt.tier); got != tt.want {
			t.Errorf("%s{tier=%q} = %v, want %v", tt.name, tt.tier, got, tt.want)
		}
	}
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != 2 || label(m, "tier") == "trial" {
				t.Errorf("%s has labels %v, want plan and tier, no shadow tier", mf.GetName(), m.GetLabel())
			}
		}
	}
	// The developer's own keys, in their order; the idle key too.
	own, err := h.Keys(ctx, []analytics.Consumer{{KeyID: keys[2].ID, Label: "idle"}, {KeyID: keys[1].ID, Label: "light"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(own) != 2 || own[0].Label != "idle" || own[0].Max != 0 || own[1].Max != 20 {
		t.Errorf("own keys %+v, want idle at 0 %% and light at 20 %% (2 of 10 searches)", own)
	}
}

func TestTopConsumersRankByRequestsAndRejections(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	r := analytics.NewRollup(pool, analytics.Options{Now: func() time.Time { return day0 }})
	var uid int64
	if err := pool.QueryRow(ctx, `INSERT INTO users (email, password_hash, role) VALUES ('ann@example.com', 'x', 'developer') RETURNING id`).Scan(&uid); err != nil {
		t.Fatal(err)
	}
	var kid int64
	if err := pool.QueryRow(ctx, `INSERT INTO api_keys (user_id, name) VALUES ($1, 'ci') RETURNING id`, uid).Scan(&kid); err != nil {
		t.Fatal(err)
	}
	add := func(at time.Time, o requestlog.Outcome, user, key int64, n int) {
		for range n {
			e := decision(at, o, 200, user, key, "GET /a", time.Millisecond)
			r.Observe(&e)
		}
	}
	add(day0, requestlog.Admitted, uid, kid, 30)                  // day 1
	add(day0.Add(25*time.Hour), requestlog.Rejected, uid, kid, 5) // day 2
	add(day0.Add(25*time.Hour), requestlog.Admitted, 0, 0, 20)    // anonymous, day 2
	add(day0.Add(25*time.Hour), requestlog.Rejected, 0, 0, 8)     // anonymous, day 2
	add(day0.Add(72*time.Hour), requestlog.Admitted, 7, 77, 1000) // day 4: outside
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	q := analytics.NewReader(pool)
	from, to := day0, day0.Add(48*time.Hour)
	top, err := q.TopConsumers(ctx, from, to, "", 0, analytics.ByRequests, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(top) != 2 || top[0].Label != "ci (ann@example.com)" || top[0].Requests != 35 || top[0].Rejected != 5 ||
		top[1].Label != "anonymous, 198.51.100.0/24" || top[1].Requests != 28 {
		t.Errorf("top by requests %+v", top)
	}
	rej, err := q.TopConsumers(ctx, from, to, "", 0, analytics.ByRejected, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(rej) != 2 || rej[0].Rejected != 8 || rej[0].KeyID != 0 || rej[1].KeyID != kid {
		t.Errorf("top by rejections %+v, want the anonymous block (8) before the key (5)", rej)
	}
	mine, err := q.TopConsumers(ctx, from, to, "", uid, analytics.ByRejected, 10)
	if err != nil || len(mine) != 1 || mine[0].KeyID != kid {
		t.Errorf("one developer's: %+v, %v", mine, err)
	}
	if one, err := q.TopConsumers(ctx, from, to, "", 0, analytics.ByRequests, 1); err != nil || len(one) != 1 {
		t.Errorf("limit 1: %+v, %v", one, err)
	}
}
