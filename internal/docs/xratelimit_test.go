package docs_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/docs"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/sampleapi"
)

// TestOpenAPIQuotaAndCountPerRows: a quota appears in x-ratelimit with its
// period and its renewal at the billing anchor, not as a one-day window,
// and every row says whose state it counts.
func TestOpenAPIQuotaAndCountPerRows(t *testing.T) {
	ps := []plans.Plan{{Slug: "free", Name: "Free", IsPublic: true, IsDefault: true, Limits: []plans.Limit{
		{Name: "monthly", Algorithm: enforce.Quota, Period: enforce.PeriodMonth, Limit: 1000, Window: 24 * time.Hour, Cost: 1},
		{Name: "items", Route: sampleapi.RouteItem, Algorithm: enforce.FixedWindow, Limit: 60, Window: time.Minute, Cost: 1},
		{Name: "items-team", Route: sampleapi.RouteItem, Algorithm: enforce.SlidingWindowLog, Limit: 600, Window: time.Hour, Cost: 1, CountPer: "developer"},
	}}}
	m, err := docs.Build(ps, docs.Options{BaseURL: "https://api.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := docs.OpenAPI(m)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]struct {
			XRateLimit []struct {
				Plan   string           `json:"plan"`
				Limits []map[string]any `json:"limits"`
			} `json:"x-ratelimit"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	rows := map[string]map[string]any{}
	for _, rl := range doc.Paths["/api/items/{id}"]["get"].XRateLimit {
		for _, l := range rl.Limits {
			rows[l["policy"].(string)] = l
		}
	}
	want := map[string]map[string]any{
		"free-monthly": {"scope": "plan", "algorithm": "quota", "limit": 1000.0, "period": "month", "renews": "billing_anchor",
			"count_per": "developer", "window_seconds": nil},
		"free-items": {"scope": "endpoint", "algorithm": "fixed_window", "limit": 60.0, "window_seconds": 60.0,
			"count_per": "key", "period": nil},
		"free-items-team": {"scope": "endpoint", "algorithm": "sliding_window_log", "window_seconds": 3600.0, "count_per": "developer"},
	}
	for policy, fields := range want {
		row, ok := rows[policy]
		if !ok {
			t.Errorf("x-ratelimit of GET /api/items/{id} lacks %s; has %v", policy, rows)
			continue
		}
		for k, v := range fields {
			if got := row[k]; got != v {
				t.Errorf("%s.%s = %v, want %v", policy, k, got, v)
			}
		}
	}
	// The HTML and Markdown docs say so too, where the figures are.
	md := docs.Markdown(m)
	if !strings.Contains(md, "600 per hour, counted across all your keys") {
		t.Errorf("Markdown does not say items-team counts across all keys:\n%s", md)
	}
}
