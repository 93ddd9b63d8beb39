package web_test

import (
	"context"
	"encoding/csv"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/analytics"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/history"
	"github.com/sluicehq/sluice/internal/metering"
	"github.com/sluicehq/sluice/internal/requestlog"
	"github.com/sluicehq/sluice/internal/snapshot"
	"github.com/sluicehq/sluice/internal/users"
	"github.com/sluicehq/sluice/web"
)

func TestAnalyticsPages(t *testing.T) {
	// The snapshot is loaded once the plan and keys exist.
	var snap *snapshot.Snapshot
	e := newEnvWith(t, func(d *web.Deps) {
		d.Analytics = analytics.NewReader(d.Pool)
		d.RequestLog, d.RequestLogAdmitSample = requestlog.NewReader(d.Pool), 1
		d.Headroom = analytics.NewHeadroom(d.Analytics, d.Limiter, func() analytics.Snapshot {
			if snap == nil {
				return nil
			}
			return snap
		})
	})
	ctx := context.Background()
	p := e.createPlan("gold", searchTier)
	other, err := e.users.Create(ctx, users.NewUser{Email: "other@example.com", Password: testPassword, Role: users.RoleDeveloper, PlanID: &p.ID})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.users.SetPlan(ctx, e.dev.ID, &p.ID, e.dev.Version); err != nil {
		t.Fatal(err)
	}
	mine, _ := e.createKey(e.dev.ID, "mine")
	theirs, _ := e.createKey(other.ID, "theirs")
	if snap, err = snapshot.Load(ctx, e.pool); err != nil {
		t.Fatal(err)
	}
	// Every decision goes to the request log's writer (which feeds the
	// rollup) and to the usage history, as the engine's hooks do.
	rollup := analytics.NewRollup(e.pool, analytics.Options{})
	w := requestlog.NewWriter(e.pool, requestlog.Options{AdmitSample: 1, Observer: rollup})
	hist := history.NewRecorder(e.pool, history.Options{})
	now := time.Now().UTC()
	decide := func(key int64, n int) (admitted, rejected int) {
		caller, _ := snap.KeyCaller(key)
		for range n {
			d, err := e.store.Allow(ctx, enforce.Request{Subject: caller.Subject, Key: caller.Key, Route: "GET /api/search", Limits: caller.Limits})
			if err != nil {
				t.Fatal(err)
			}
			en := requestlog.Entry{At: now, WayIn: requestlog.WayMiddleware, Plan: "gold", Route: "GET /api/search",
				KeyID: caller.KeyID, UserID: caller.UserID, Outcome: requestlog.Admitted, Status: 200, UpstreamStatus: 200, Latency: 20 * time.Millisecond}
			if !d.Allowed {
				b := d.Binding()
				en.Outcome, en.Status, en.UpstreamStatus, en.Latency, en.Layer, en.RetryAfter = requestlog.Rejected, 429, 0, 0, b.Limit.Name, b.RetryAfter
				rejected++
			} else {
				admitted++
			}
			w.Log(en)
			hist.RecordDecision(caller, "GET /api/search", 1, d.Allowed)
		}
		return admitted, rejected
	}
	// The search tier is a token bucket of burst 20: 25 calls reject 5.
	if a, r := decide(mine.ID, 25); a != 20 || r != 5 {
		t.Fatalf("mine: %d admitted, %d rejected", a, r)
	}
	decide(theirs.ID, 3)
	for _, f := range []func(context.Context) error{w.Flush, rollup.Flush, hist.Flush} {
		if err := f(ctx); err != nil {
			t.Fatal(err)
		}
	}

	op := e.signedIn(operatorEmail)
	res := op.get("/admin/analytics", nil)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("operator page: %d %s", res.StatusCode, res.body)
	}
	d := res.doc(t)
	// Every answer took 20 ms, in the histogram's bucket from 19.2 to
	// 28.8 ms: the percentiles are read within it.
	for id, want := range map[string]string{"analytics-requests": "28", "analytics-rejected": "5", "analytics-latency": "24 ms / 28 ms / 29 ms"} {
		if got := text(d, id); got != want {
			t.Errorf("%s = %q, want %q", id, got, want)
		}
	}
	if s, _ := d.Find(`[data-testid="analytics-by-class"]`).Attr("data-series"); s != "2" {
		t.Errorf("status classes drawn: %s, want 2 (2xx and 429)", s)
	}
	if s, _ := d.Find(`[data-testid="analytics-by-consumer"]`).Attr("data-series"); s != "3" {
		t.Errorf("consumer series: %s, want both keys and other", s)
	}
	if got := text(d, "analytics-rejected-top-row"); !strings.HasPrefix(got, "mine (dev@example.com)") {
		t.Errorf("top rejected %q, want mine first", got)
	}
	if got := text(d, "analytics-top-row"); !strings.HasPrefix(got, "mine (dev@example.com)") {
		t.Errorf("top consumers %q, want mine first", got)
	}
	if got := text(d, "analytics-headroom-key"); got != "mine (dev@example.com)" {
		t.Errorf("headroom's heaviest key %q", got)
	}
	if m, _ := d.Find(`[data-testid="analytics-headroom-row"]`).First().Attr("data-max"); m != "100" {
		t.Errorf("the heaviest key runs at %s %%, want 100 (its burst spent)", m)
	}
	if res := op.get("/admin/analytics?range=1y", nil); res.StatusCode != http.StatusBadRequest {
		t.Errorf("bad range: %d, want 400", res.StatusCode)
	}
	for _, rg := range []string{"7d", "30d"} {
		if res := op.get("/admin/analytics?range="+rg+"&plan=gold", nil); res.StatusCode != http.StatusOK || text(res.doc(t), "analytics-requests") != "28" {
			t.Errorf("range %s: %d, requests %q", rg, res.StatusCode, text(res.doc(t), "analytics-requests"))
		}
	}

	dev := e.signedIn(developerEmail)
	res = dev.get("/app/analytics", nil)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("developer page: %d", res.StatusCode)
	}
	d = res.doc(t)
	if got := text(d, "analytics-requests"); got != "25" {
		t.Errorf("the developer's requests %q, want their own 25", got)
	}
	if got := text(d, "analytics-rejected"); got != "5" {
		t.Errorf("the developer's rejections %q, want 5", got)
	}
	if strings.Contains(res.body, "theirs") || strings.Contains(res.body, "other@example.com") {
		t.Error("the developer's page shows another developer's key")
	}
	if n := count(d, "analytics-headroom-row"); n != 1 {
		t.Errorf("%d headroom rows, want the developer's one key", n)
	}
	if res := dev.get("/admin/analytics", nil); res.StatusCode != http.StatusForbidden {
		t.Errorf("developer on the operator's analytics: %d, want 403", res.StatusCode)
	}
}

func TestUsageRecordsDownload(t *testing.T) {
	e := newEnvWith(t, func(d *web.Deps) { d.UsageRecords = metering.NewReader(d.Pool) })
	day := time.Now().UTC().Truncate(24 * time.Hour).Add(-24 * time.Hour)
	for i, start := range []time.Time{day, day.Add(-40 * 24 * time.Hour)} {
		if _, err := e.pool.Exec(context.Background(), `INSERT INTO meter_records (id, user_id, plan, tier, period_start, period_end, revision, requests, rejected)
VALUES ($1, $2, 'gold', '', $3, $4, 0, $5, 0)`, metering.RecordID(e.dev.ID, "gold", "", start, 0), e.dev.ID, start, start.Add(24*time.Hour), 10+i); err != nil {
			t.Fatal(err)
		}
	}
	op := e.signedIn(operatorEmail)
	res := op.get("/admin/usage-records.csv", nil)
	rows, err := csv.NewReader(strings.NewReader(res.body)).ReadAll()
	if res.StatusCode != http.StatusOK || err != nil || len(rows) != 2 || rows[1][2] != developerEmail || rows[1][8] != "10" {
		t.Errorf("default range: %d %q (%v), want the header and the record of yesterday only", res.StatusCode, rows, err)
	}
	res = op.get("/admin/usage-records.csv?from="+day.Add(-50*24*time.Hour).Format(time.DateOnly), nil)
	if rows, _ := csv.NewReader(strings.NewReader(res.body)).ReadAll(); len(rows) != 3 {
		t.Errorf("from 50 days back: %d lines, want both records", len(rows))
	}
	if res := op.get("/admin/usage-records.csv?from=last+week", nil); res.StatusCode != http.StatusBadRequest {
		t.Errorf("bad from: %d, want 400", res.StatusCode)
	}
	if res := e.signedIn(developerEmail).get("/admin/usage-records.csv", nil); res.StatusCode != http.StatusForbidden {
		t.Errorf("a developer: %d, want 403", res.StatusCode)
	}
}
