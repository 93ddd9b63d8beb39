package web_test

import (
	"context"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/web"
)

// BenchmarkDashboard measures the server time to answer the plans list and
// the keys list with 1,000 plans (two tiers each), 1,000 developers and
// 100,000 keys, 1,000 of them used in the last hour, over real Postgres,
// through HTTP on loopback (so it includes the session lookup). It reports
// p50 and p95 per request besides the mean.
//
//	go test -run '^$' -bench BenchmarkDashboard -benchtime 200x ./web
//
// Figures on the shared 2-core development machine (Go 1.26, Postgres 15,
// other engineers' builds running, so p95 is noisy), -benchtime 50x:
//
//	plans list, usage summary cached         p50   54 ms   p95  170 ms
//	plans list, usage summary recomputed     p50   79 ms   p95  139 ms
//	keys list, first page of 50              p50  371 ms   p95  845 ms
//	keys search by owner email               p50  757 ms   p95 1158 ms
//	keys search by secret prefix             p50 1443 ms   p95 1953 ms
//
// Rendering alone (views benchmarks) is 3-4.5 ms for the 1,000-plan list and
// 0.3-0.5 ms for a page of 50 keys; the rest is the queries. The keys list's
// time is apikeys.List: count(*) OVER () over every matching key, with a
// correlated prefix subquery per row, before the LIMIT.
func BenchmarkDashboard(b *testing.B) {
	var offset atomic.Int64 // nanoseconds the benchmark's clock is ahead
	clock := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	e := newEnvWith(b, func(d *web.Deps) { d.Now = clock })
	seedDashboard(b, e)
	c := e.signedIn(operatorEmail)
	c.http.Timeout = time.Minute

	run := func(b *testing.B, path string, before func()) {
		if res := c.get(path, nil); res.StatusCode != http.StatusOK {
			b.Fatalf("GET %s: status %d", path, res.StatusCode)
		}
		times := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for range b.N {
			if before != nil {
				before()
			}
			start := time.Now()
			res := c.get(path, nil)
			times = append(times, time.Since(start))
			if res.StatusCode != http.StatusOK {
				b.Fatalf("GET %s: status %d", path, res.StatusCode)
			}
		}
		b.StopTimer()
		slices.Sort(times)
		b.ReportMetric(float64(times[len(times)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(times[len(times)*95/100].Microseconds())/1000, "p95-ms")
	}
	b.Run("PlansList", func(b *testing.B) { run(b, "/admin/plans", nil) })
	b.Run("PlansListUsageRecomputed", func(b *testing.B) {
		// Step the clock past the usage cache's life before every request.
		run(b, "/admin/plans", func() { offset.Add(int64(11 * time.Second)) })
	})
	b.Run("KeysListFirstPage", func(b *testing.B) { run(b, "/admin/keys", nil) })
	b.Run("KeysSearchOwner", func(b *testing.B) { run(b, "/admin/keys?q=dev421%40example.com", nil) })
	b.Run("KeysSearchPrefix", func(b *testing.B) { run(b, "/admin/keys?q=sk_live_0000a", nil) })
}

// seedDashboard fills the database in bulk and gives the recently used keys
// some traffic in the memory store.
func seedDashboard(b *testing.B, e *env) {
	b.Helper()
	ctx := context.Background()
	stmts := []string{
		`INSERT INTO plans (slug, name) SELECT 'plan-' || g, 'Plan ' || g FROM generate_series(1, 1000) g`,
		`INSERT INTO plan_limits (plan_id, name, route, algorithm, limit_count, window_ms, position)
		 SELECT id, 'all', '', 'token_bucket', 1000, 60000, 0 FROM plans`,
		`INSERT INTO plan_limits (plan_id, name, route, algorithm, limit_count, window_ms, position)
		 SELECT id, 'search', 'GET /api/search', 'sliding_window_log', 100, 60000, 1 FROM plans`,
		`INSERT INTO users (email, password_hash, role, plan_id)
		 SELECT 'dev' || g || '@example.com', 'not-a-hash', 'developer', (SELECT min(id) FROM plans) + g % 1000
		 FROM generate_series(1, 1000) g`,
		`INSERT INTO api_keys (user_id, name)
		 SELECT (SELECT min(id) FROM users WHERE email LIKE 'dev%@example.com' AND email <> 'dev@example.com') + g % 1000, 'key ' || g
		 FROM generate_series(1, 100000) g`,
		`INSERT INTO api_key_secrets (key_id, hash, prefix)
		 SELECT id, sha256(convert_to(id::text, 'UTF8')), 'sk_live_' || lpad(to_hex(id), 8, '0') FROM api_keys`,
		`UPDATE api_keys SET last_used_at = now() WHERE id % 100 = 0`,
		`ANALYZE`,
	}
	for _, s := range stmts {
		if _, err := e.pool.Exec(ctx, s); err != nil {
			b.Fatalf("seed: %v\n%s", err, s)
		}
	}
	rows, err := e.pool.Query(ctx, `SELECT user_id FROM api_keys WHERE last_used_at IS NOT NULL`)
	if err != nil {
		b.Fatal(err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			b.Fatal(err)
		}
		ids = append(ids, id)
	}
	rows.Close()
	lim := enforce.Limit{Name: "bench", Algorithm: enforce.FixedWindow, Limit: 5, Window: time.Minute}
	for _, id := range ids {
		for range 7 {
			if _, err := e.store.Allow(ctx, enforce.Request{Subject: enforce.DeveloperSubject(id), Route: "GET /api/search", Limits: []enforce.Limit{lim}}); err != nil {
				b.Fatal(err)
			}
		}
	}
}
