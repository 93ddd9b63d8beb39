package guard_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice/guard"
)

// TestGuardReportsItsDecisionsToTheRequestLog: a guarded API's admissions
// (with the API's status and latency, which only the guard sees) and its
// refusals reach the portal's request log in Postgres, under way in
// "guard", through POST /v1/policy/log with the service token.
func TestGuardReportsItsDecisionsToTheRequestLog(t *testing.T) {
	p := newPortal(t)
	ctx := context.Background()
	g, err := guard.New(ctx, guard.Options{PortalURL: p.url, Token: p.token})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /items/{id}", g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(5 * time.Millisecond)
		w.WriteHeader(http.StatusAccepted)
	})))
	codes := map[int]int{}
	for range 5 { // the plan's tier admits 3
		req := httptest.NewRequest("GET", "/items/1", nil)
		req.Header.Set("Authorization", "Bearer "+p.secret)
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		codes[rec.Code]++
	}
	if codes[http.StatusAccepted] != 3 || codes[http.StatusTooManyRequests] != 2 {
		t.Fatalf("answers %v, want 3 admitted and 2 refused", codes)
	}
	g.Close() // sends what is queued
	if err := p.reqlog.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	pool := p.pool
	type row struct {
		outcome  string
		upstream int
		latency  float64
		key      int64
	}
	rows, err := pool.Query(ctx, `SELECT outcome, upstream_status, latency_us / 1000.0, key_id FROM request_log WHERE way_in = 'guard' ORDER BY at`)
	if err != nil {
		t.Fatal(err)
	}
	var got []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.outcome, &r.upstream, &r.latency, &r.key); err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	if len(got) != 5 {
		t.Fatalf("request log holds %d guard rows, want 5: %+v", len(got), got)
	}
	admitted, rejected := 0, 0
	for _, r := range got {
		if r.key != p.key.ID {
			t.Errorf("row for key %d, want %d", r.key, p.key.ID)
		}
		switch r.outcome {
		case "admitted":
			admitted++
			if r.upstream != http.StatusAccepted || r.latency < 5 {
				t.Errorf("admitted row: upstream %d, latency %.1f ms; want 202 and at least 5 ms", r.upstream, r.latency)
			}
		case "rejected":
			rejected++
		}
	}
	if admitted != 3 || rejected != 2 {
		t.Errorf("rows: %d admitted, %d rejected; want 3 and 2", admitted, rejected)
	}
}
