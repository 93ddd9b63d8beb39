package main

import (
	"context"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/sampleapi"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/users"
)

// TestRunFlushesTheHistoryOnStop: with a flush interval far longer than the
// test, nothing reaches Postgres while the portal runs, and every decision
// is there once run has returned after SIGTERM.
func TestRunFlushesTheHistoryOnStop(t *testing.T) {
	env := baseEnv(t)
	env["DATABASE_URL"] = testenv.PostgresURL(t)
	env["PORTAL_HISTORY_FLUSH_INTERVAL"] = "5m"
	pool, err := pgxpool.New(context.Background(), env["DATABASE_URL"])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	p := startPortal(t, env)

	ctx := context.Background()
	routes := []string{sampleapi.RouteSearch, sampleapi.RouteItem, sampleapi.RouteCreateReport, sampleapi.RouteJob}
	logger := slog.New(slog.DiscardHandler)
	dev, err := users.NewRepo(pool).Create(ctx, users.NewUser{Email: "dev@example.com", Password: "a long developer password", Role: users.RoleDeveloper})
	if err != nil {
		t.Fatal(err)
	}
	pl, err := plans.NewService(pool, routes, logger).Create(ctx, "test", plans.PlanInput{Slug: "small", Name: "Small", IsPublic: true,
		Limits: []plans.LimitInput{{Name: "items", Route: sampleapi.RouteItem, Algorithm: "fixed_window", Limit: 3, WindowSeconds: 3600}}})
	if err != nil {
		t.Fatal(err)
	}
	_, secret, err := apikeys.NewService(pool, routes, logger).Create(ctx, "test", apikeys.NewKey{UserID: dev.ID, Name: "k", PlanID: &pl.ID})
	if err != nil {
		t.Fatal(err)
	}
	call := func() int {
		req, _ := http.NewRequest(http.MethodGet, p.url+"/api/items/1", nil)
		req.Header.Set("Authorization", "Bearer "+secret)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	// The snapshot learns of the key from NOTIFY.
	deadline := time.Now().Add(30 * time.Second)
	for call() == http.StatusUnauthorized {
		if time.Now().After(deadline) {
			t.Fatal("the portal did not accept the new key within 30 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	for range 4 {
		call()
	}
	var rows int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM usage_minutes`).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("%d history rows before the stop (%v), want none yet", rows, err)
	}
	if err := p.stop(t); err != nil {
		t.Fatal(err)
	}
	var admitted, rejected int64
	if err := pool.QueryRow(ctx, `SELECT sum(admitted), sum(rejected) FROM usage_hours WHERE user_id = $1 AND plan = 'small' AND route = $2`,
		dev.ID, sampleapi.RouteItem).Scan(&admitted, &rejected); err != nil {
		t.Fatal(err)
	}
	if admitted != 3 || rejected != 2 {
		t.Errorf("after the stop the history holds %d admitted and %d rejected, want 3 and 2", admitted, rejected)
	}
}
