package docs_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/docs"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/sampleapi"
)

// BenchmarkBuild measures building the docs for plans like the demo ones
// (the largest drains a token bucket of 500 to record a 429 on every
// endpoint). The web layer caches the model per plan versions, so this is
// paid once per plan change, not per page view.
//
//	go test -run '^$' -bench Build ./internal/docs/
//
// On the 2-core development machine: about 7 ms per build (it was 630 ms
// before degraded answers ended the drain and the recorder was reused).
func BenchmarkBuild(b *testing.B) {
	all := []plans.Plan{
		{Slug: "anonymous", Name: "Anonymous", IsPublic: true, IsAnonymous: true, Limits: []plans.Limit{
			{Name: "global", Algorithm: enforce.FixedWindow, Limit: 60, Window: time.Minute},
			{Name: "search", Route: sampleapi.RouteSearch, Algorithm: enforce.SlidingWindowLog, Limit: 10, Window: time.Minute},
			{Name: "reports", Route: sampleapi.RouteCreateReport, Algorithm: enforce.LeakyBucket, Limit: 6, Window: time.Minute, Burst: 2, Mode: enforce.ModeQueue},
		}},
		{Slug: "free", Name: "Free", IsPublic: true, IsDefault: true, Limits: []plans.Limit{
			{Name: "global", Algorithm: enforce.TokenBucket, Limit: 1000, Window: time.Hour, Burst: 100},
			{Name: "search", Route: sampleapi.RouteSearch, Algorithm: enforce.SlidingWindowCounter, Limit: 30, Window: time.Minute, Mode: enforce.ModeDegrade},
			{Name: "reports", Route: sampleapi.RouteCreateReport, Algorithm: enforce.LeakyBucket, Limit: 10, Window: time.Minute, Burst: 3, Mode: enforce.ModeQueue},
		}},
		{Slug: "pro", Name: "Pro", IsPublic: true, Limits: []plans.Limit{
			{Name: "global", Algorithm: enforce.TokenBucket, Limit: 10000, Window: time.Hour, Burst: 500},
			{Name: "search", Route: sampleapi.RouteSearch, Algorithm: enforce.TokenBucket, Limit: 100, Window: time.Minute, Burst: 20, Mode: enforce.ModeDegrade},
			{Name: "reports", Route: sampleapi.RouteCreateReport, Algorithm: enforce.LeakyBucket, Limit: 60, Window: time.Minute, Burst: 10, Mode: enforce.ModeQueue},
		}},
	}
	for b.Loop() {
		if _, err := docs.Build(all, docs.Options{}); err != nil {
			b.Fatal(err)
		}
	}
}
