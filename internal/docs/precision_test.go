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

// TestPrecisionBound: the line states enforce.LeaseBounds' figures for each
// precision and algorithm kind, and says so when a limit is too small to
// lease.
func TestPrecisionBound(t *testing.T) {
	log := enforce.Limit{Name: "x", Algorithm: enforce.SlidingWindowLog, Limit: 2000, Window: time.Minute, Cost: 1}
	with := func(l enforce.Limit, p enforce.Precision) enforce.Limit { l.Precision = p; return l }
	fixed := log
	fixed.Algorithm = enforce.FixedWindow
	for _, tc := range []struct {
		name      string
		l         enforce.Limit
		instances int
		want      string
	}{
		{"Exact", log, 2, "exact: every request decided in Redis"},
		{"LeasedLog", with(log, enforce.PrecisionLeased), 2, "leased: at most 40 over, at most 40 under the limit per window with 2 instances; leases of up to 20"},
		{"LeasedFixedWindowNeverOver", with(fixed, enforce.PrecisionLeased), 4, "leased: never over, at most 40 under the limit per window with 4 instances; leases of up to 10"},
		{"LeasedTooSmall", with(enforce.Limit{Name: "s", Algorithm: enforce.TokenBucket, Limit: 10, Window: time.Minute, Cost: 1}, enforce.PrecisionLeased), 2,
			"leased: too small to lease with 2 instances, so every request is decided exactly"},
		{"LocalOne", with(log, enforce.PrecisionLocal), 1, "local: the one instance enforces 2000 on its own, no Redis"},
		{"LocalRoundsUp", with(enforce.Limit{Name: "r", Algorithm: enforce.TokenBucket, Limit: 10, Window: time.Minute, Cost: 1}, enforce.PrecisionLocal), 3,
			"local: each of 3 instances enforces 4 on its own, no Redis; a caller reaching one instance gets 4, all together at most 2 over"},
		{"ZeroInstancesIsOne", with(log, enforce.PrecisionLeased), 0, "leased: at most 40 over, at most 40 under the limit per window with 1 instance; leases of up to 40"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := docs.PrecisionBound(tc.l, tc.instances); got != tc.want {
				t.Errorf("PrecisionBound = %q\n                  want %q", got, tc.want)
			}
		})
	}
}

// TestDocsStatePrecision: the docs generated from a plan say, for a leased
// and a local limit, what the headers' Remaining is and the bound with the
// API's instances, in Markdown and in x-ratelimit; an exact limit says
// nothing new.
func TestDocsStatePrecision(t *testing.T) {
	ps := []plans.Plan{{Slug: "free", Name: "Free", IsPublic: true, IsDefault: true, Limits: []plans.Limit{
		{Name: "items", Route: sampleapi.RouteItem, Algorithm: enforce.SlidingWindowLog, Limit: 2000, Window: time.Minute, Cost: 1, Precision: enforce.PrecisionLeased},
		{Name: "all", Algorithm: enforce.TokenBucket, Limit: 600, Window: time.Minute, Cost: 1, Precision: enforce.PrecisionLocal},
		{Name: "month", Algorithm: enforce.Quota, Period: enforce.PeriodMonth, Limit: 1000, Window: 24 * time.Hour, Cost: 1, Precision: enforce.PrecisionExact},
	}}}
	m, err := docs.Build(ps, docs.Options{BaseURL: "https://api.example.com", Instances: 2})
	if err != nil {
		t.Fatal(err)
	}
	md := docs.Markdown(m)
	for _, want := range []string{
		"Precision leased: each instance of the API (2) decides from a slice of this limit's budget",
		"X-RateLimit-Remaining is what that instance holds plus what the shared counters had left when it last leased",
		"In numbers: at most 40 over, at most 40 under the limit per window with 2 instances; leases of up to 20.",
		"Precision local: each instance of the API (2) enforces its share of this limit on its own, so X-RateLimit-Remaining is that instance's share.",
		"In numbers: each of 2 instances enforces 300 on its own",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("Markdown lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "Precision exact") {
		t.Errorf("an exact limit's docs speak of precision:\n%s", md)
	}
	raw, err := docs.OpenAPI(m)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]struct {
			XRateLimit []struct {
				Limits []map[string]any `json:"limits"`
			} `json:"x-ratelimit"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	got := map[string]any{}
	for _, rl := range doc.Paths["/api/items/{id}"]["get"].XRateLimit {
		for _, l := range rl.Limits {
			got[l["policy"].(string)] = l["precision"]
		}
	}
	want := map[string]any{"free-items": "leased", "free-all": "local", "free-month": "exact"}
	for policy, p := range want {
		if got[policy] != p {
			t.Errorf("x-ratelimit %s precision = %v, want %v", policy, got[policy], p)
		}
	}
}
