package views

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/plans"
)

// The render-only share of the dashboard's lists (no database): templ
// writing the plans list with 1,000 plans and one page of 50 keys.
//
//	go test -run '^$' -bench Render -benchmem ./views

func BenchmarkRenderPlansList1000(b *testing.B) {
	rows := make([]PlanRow, 1000)
	for i := range rows {
		rows[i] = PlanRow{
			Plan: plans.Plan{ID: int64(i + 1), Slug: fmt.Sprintf("plan-%d", i), Name: fmt.Sprintf("Plan %d", i),
				Limits: []plans.Limit{{Name: "all", Algorithm: enforce.TokenBucket, Limit: 1000, Window: time.Minute},
					{Name: "search", Route: "GET /api/search", Algorithm: enforce.SlidingWindowLog, Limit: 100, Window: time.Minute}}},
			Keys: 100, Developers: 1, Admitted: 12345, Rejected: 67,
		}
	}
	p := Page{Title: "Plans", Section: "plans", Viewer: &Viewer{ID: 1, Email: "op@example.com", Role: "operator"}, AssetPrefix: "/static/"}
	b.ReportAllocs()
	for b.Loop() {
		if err := PlansPage(p, PlansList{Rows: rows}).Render(context.Background(), io.Discard); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRenderKeysPage50(b *testing.B) {
	now := time.Now()
	keys := make([]apikeys.Key, 50)
	for i := range keys {
		keys[i] = apikeys.Key{ID: int64(100000 - i), OwnerEmail: fmt.Sprintf("dev%d@example.com", i), Name: fmt.Sprintf("key %d", i),
			Prefix: "sk_live_0000abcd", PlanSlug: "plan-7", CreatedAt: now, LastUsedAt: &now}
	}
	p := Page{Title: "API keys", Section: "keys", Viewer: &Viewer{ID: 1, Email: "op@example.com", Role: "operator"}, AssetPrefix: "/static/"}
	b.ReportAllocs()
	for b.Loop() {
		if err := KeysPage(p, KeysList{Keys: keys, Total: 100000, PageSize: 50, Now: now}).Render(context.Background(), io.Discard); err != nil {
			b.Fatal(err)
		}
	}
}
