package tests

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/plans"
)

// TestThePortalLogsItsOwnDecisions: the built portal's sample API, behind
// the embedded middleware, logs each of its decisions to the request log
// in Postgres: the admissions with the API's status and latency, the
// rejection with the layer that fired and its Retry-After, the key by id.
func TestThePortalLogsItsOwnDecisions(t *testing.T) {
	p := startPortalWith(t, portalConfig{env: map[string]string{"PORTAL_REQUEST_LOG_ADMIT_SAMPLE": "1"}})
	key, secret := p.keyOnPlan(t, "gold",
		plans.LimitInput{Name: "search", Route: "GET /api/search", Algorithm: "fixed_window", Limit: 2, WindowSeconds: 3600})
	for i, want := range []int{http.StatusOK, http.StatusOK, http.StatusTooManyRequests} {
		if s := apiStatus(t, p.URL, "/api/search?q=log", secret); s != want {
			t.Fatalf("request %d answered %d, want %d", i, s, want)
		}
	}
	// The writer writes every second, off the request path: wait for it.
	var admitted, rejected int64
	took, ok := eventually(60*time.Second, func() bool {
		err := p.Pool.QueryRow(context.Background(), `
SELECT count(*) FILTER (WHERE outcome = 'admitted' AND status = 200 AND upstream_status = 200),
       count(*) FILTER (WHERE outcome = 'rejected' AND status = 429 AND upstream_status = 0 AND layer = 'gold-search' AND retry_after > 0)
FROM request_log WHERE key_id = $1 AND user_id = $2 AND route = 'GET /api/search' AND way_in = 'middleware'`, key.ID, p.Dev.ID).Scan(&admitted, &rejected)
		return err == nil && admitted == 2 && rejected == 1
	})
	if !ok {
		t.Fatalf("after %v the request log holds %d admitted and %d rejected rows of the key, want 2 and 1", took, admitted, rejected)
	}
}
