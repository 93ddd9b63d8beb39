package planfile_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/internal/planfile"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/testenv"
)

// The routes of the shapes: search has a reduced answer (degrade tiers may
// sit on it), items has none.
const (
	routeSearch = "GET /api/search"
	routeItems  = "GET /api/items/{id}"
)

var shapeRoutes = []string{routeSearch, routeItems, "GET /api/rate-limit-status"}

// tierShapes generates one tier of every shape a plan can hold: each
// algorithm plan-wide and on a route, every quota period side by side on
// one route, concurrency limits rejecting and queueing, shadow tiers of
// every algorithm, degrade and queue modes, buckets with and without a
// burst, a cost above 1, both ways of counting (per key plan-wide, per
// developer on a route), and every precision an algorithm may have (exact
// said and unsaid, leased, local). Windows are given to every tier, as the
// dashboard's form sends them, even where the algorithm has no use for
// one.
func tierShapes() [][]plans.LimitInput {
	type algo struct {
		name   string
		window int64
		burst  int64
	}
	rates := []algo{
		{"fixed_window", 60, 0}, {"sliding_window_log", 10, 0}, {"sliding_window_counter", 3600, 0},
		{"token_bucket", 1, 0}, {"token_bucket", 60, 25}, {"leaky_bucket", 1, 0}, {"leaky_bucket", 60, 7},
	}
	var sets [][]plans.LimitInput
	precisions := []string{"", "leased", "local", "exact"}
	// Every rate algorithm, plan-wide and on a route, counted both ways,
	// enforced and in shadow, of every precision.
	for i, a := range rates {
		var set []plans.LimitInput
		for j, route := range []string{"", routeItems} {
			for k, countPer := range []string{"", plans.CountPerKey, plans.CountPerDeveloper} {
				mode := "reject"
				if k == 2 {
					mode = "shadow"
				}
				set = append(set, plans.LimitInput{
					Name: fmt.Sprintf("r%d-%d-%d", i, j, k), Route: route, Algorithm: a.name, Mode: mode,
					Limit: 100 + int64(k), WindowSeconds: a.window + int64(k), Burst: a.burst, Cost: int64(1 + j), CountPer: countPer,
					Precision: precisions[(j*3+k)%len(precisions)],
				})
			}
		}
		sets = append(sets, set)
	}
	// Quotas: day, month and year side by side, plan-wide and on a
	// route, one in shadow, with the window the dashboard's form sends.
	var quotas []plans.LimitInput
	for j, route := range []string{"", routeItems} {
		for k, period := range []string{"day", "month", "year"} {
			mode := "reject"
			if k == 2 && j == 1 {
				mode = "shadow"
			}
			quotas = append(quotas, plans.LimitInput{
				Name: fmt.Sprintf("q-%d-%s", j, period), Route: route, Algorithm: "quota", Mode: mode,
				Limit: 1000 * int64(k+1), WindowSeconds: 60, Cost: int64(j + 1), Period: period,
				Precision: []string{"", "exact", ""}[k],
			})
		}
	}
	quotas = append(quotas, plans.LimitInput{Name: "team-day", Algorithm: "quota", Limit: 50, WindowSeconds: 60,
		Period: "day", CountPer: plans.CountPerKey})
	sets = append(sets, quotas)
	// Concurrency: reject and queue, plan-wide and on a route, in shadow,
	// counted per key plan-wide.
	sets = append(sets, []plans.LimitInput{
		{Name: "in-flight", Algorithm: "concurrency", Limit: 4, WindowSeconds: 60, Precision: "exact"},
		{Name: "in-flight-items", Route: routeItems, Algorithm: "concurrency", Limit: 2, WindowSeconds: 60, Mode: "queue"},
		{Name: "in-flight-key", Algorithm: "concurrency", Limit: 3, WindowSeconds: 60, Mode: "shadow", CountPer: plans.CountPerKey},
	})
	// Modes that need a place: degrade on the route with a reduced
	// answer, queue on a leaky bucket, beside a concurrency queue.
	sets = append(sets, []plans.LimitInput{
		{Name: "search-degrade", Route: routeSearch, Algorithm: "sliding_window_counter", Limit: 30, WindowSeconds: 60, Mode: "degrade", Precision: "local"},
		{Name: "search-queue", Route: routeSearch, Algorithm: "leaky_bucket", Limit: 10, WindowSeconds: 1, Burst: 5, Mode: "queue"},
		{Name: "search-slots", Route: routeSearch, Algorithm: "concurrency", Limit: 2, Mode: "queue"},
		{Name: "search-quota", Route: routeSearch, Algorithm: "quota", Limit: 500, Period: "month", Mode: "degrade"},
		{Name: "search-leased", Route: routeSearch, Algorithm: "token_bucket", Limit: 5000, WindowSeconds: 60, Precision: "leased"},
	})
	// Costs settled after the response: counting successes or errors
	// only, and a cost from a response header (typed in lower case, kept
	// in one spelling), on counters, a bucket and a quota.
	sets = append(sets, []plans.LimitInput{
		{Name: "llm-success", Route: routeItems, Algorithm: "fixed_window", Limit: 100, WindowSeconds: 60, CountWhen: "success"},
		{Name: "llm-errors", Algorithm: "sliding_window_counter", Limit: 10, WindowSeconds: 60, CountWhen: "error"},
		{Name: "llm-tokens", Route: routeItems, Algorithm: "token_bucket", Limit: 100000, WindowSeconds: 60, Cost: 100, CostHeader: "x-tokens-used"},
		{Name: "llm-month", Algorithm: "quota", Limit: 1000000, Period: "month", CountWhen: "success", CostHeader: "X-Tokens-Used"},
	})
	return sets
}

// shapedPlans creates one plan per shape set through plans.Service, the
// path of the dashboard and the admin API, and returns the store that
// exports them.
func shapedPlans(t *testing.T) (*planfile.Store, *pgxpool.Pool) {
	t.Helper()
	pool := testenv.Postgres(t)
	ctx := context.Background()
	svc := plans.NewService(pool, shapeRoutes, slog.New(slog.DiscardHandler)).WithReducedAnswers([]string{routeSearch})
	for i, set := range tierShapes() {
		in := plans.PlanInput{Slug: fmt.Sprintf("shape-%d", i), Name: fmt.Sprintf("Shape %d", i), IsPublic: i%2 == 0,
			IsDefault: i == 0, IsAnonymous: i == 1, Limits: set}
		if _, err := svc.Create(ctx, "test", in); err != nil {
			t.Fatalf("create %s: %v", in.Slug, err)
		}
	}
	return planfile.ForService(pool, svc), pool
}

// TestEveryShapeRoundTrips: plans of every tier shape, made as the
// dashboard and the admin API make them, export to a file that applies to
// no change, in YAML and JSON, with and without prune; applied to an empty
// portal the same file recreates the same export.
func TestEveryShapeRoundTrips(t *testing.T) {
	s, pool := shapedPlans(t)
	ctx := context.Background()
	for _, format := range []planfile.Format{planfile.YAML, planfile.JSON} {
		t.Run(string(format), func(t *testing.T) {
			first := export(t, s, format)
			for _, prune := range []bool{false, true} {
				d, err := s.Diff(ctx, decode(t, "export", first), prune)
				if err != nil {
					t.Fatalf("diff of the export (prune %v): %v\n%s", prune, err, first)
				}
				if !d.Empty() {
					t.Fatalf("diff of the export against itself (prune %v):\n%s", prune, d)
				}
			}
			audits := auditCount(t, pool)
			d, err := s.Apply(ctx, decode(t, "export", first), planfile.Options{Prune: true})
			if err != nil || !d.Empty() {
				t.Fatalf("apply of the export: %v\n%s", err, d)
			}
			if n := auditCount(t, pool); n != audits {
				t.Errorf("an apply of the export wrote %d audit entries", n-audits)
			}
			if again := export(t, s, format); !bytes.Equal(first, again) {
				t.Fatalf("export, apply, export differ:\n%s\n---\n%s", first, again)
			}
		})
	}

	t.Run("IntoAnEmptyPortal", func(t *testing.T) {
		file := export(t, s, planfile.YAML)
		empty := planfile.NewStore(testenv.Postgres(t), shapeRoutes).WithReducedAnswers([]string{routeSearch})
		d, err := empty.Apply(ctx, decode(t, "export", file), planfile.Options{Prune: true})
		if err != nil {
			t.Fatalf("apply to an empty portal: %v", err)
		}
		if want := len(tierShapes()); len(d.Changes) != want {
			t.Errorf("apply to an empty portal made %d changes, want %d plans created:\n%s", len(d.Changes), want, d)
		}
		if got := export(t, empty, planfile.YAML); !bytes.Equal(got, file) {
			t.Fatalf("the copy exports differently:\n%s\n---\n%s", got, file)
		}
	})
}

// TestExportWritesOnlyTheFieldsATierUses: no window on a quota or a
// concurrency limit, a burst only on buckets, no cost on a concurrency
// limit; and what is written is what the tier does.
func TestExportWritesOnlyTheFieldsATierUses(t *testing.T) {
	s, _ := shapedPlans(t)
	var f struct {
		Plans []struct {
			Slug   string           `yaml:"slug"`
			Limits []map[string]any `yaml:"limits"`
		} `yaml:"plans"`
	}
	b := export(t, s, planfile.YAML)
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, p := range f.Plans {
		for _, l := range p.Limits {
			algo, _ := l["algorithm"].(string)
			seen[algo]++
			_, window := l["window_seconds"]
			_, burst := l["burst"]
			_, cost := l["cost"]
			_, period := l["period"]
			bucket := algo == "token_bucket" || algo == "leaky_bucket"
			if w, ok := l["count_when"]; ok && w != "success" && w != "error" {
				t.Errorf("%s/%v: count_when %v written", p.Slug, l["name"], w)
			}
			switch {
			case (algo == "quota" || algo == "concurrency") == window:
				t.Errorf("%s/%v (%s): window_seconds written %v", p.Slug, l["name"], algo, window)
			case (algo == "quota") != period:
				t.Errorf("%s/%v (%s): period written %v", p.Slug, l["name"], algo, period)
			case (algo == "concurrency") == cost:
				t.Errorf("%s/%v (%s): cost written %v", p.Slug, l["name"], algo, cost)
			case burst && (!bucket || l["burst"] == 0):
				t.Errorf("%s/%v (%s): burst %v written", p.Slug, l["name"], algo, l["burst"])
			}
		}
	}
	for _, algo := range []string{"fixed_window", "sliding_window_log", "sliding_window_counter", "token_bucket", "leaky_bucket", "quota", "concurrency"} {
		if seen[algo] == 0 {
			t.Errorf("no %s tier exported:\n%s", algo, b)
		}
	}
	for _, p := range []string{"precision: leased", "precision: local"} {
		if !strings.Contains(string(b), p) {
			t.Errorf("no tier exported with %s:\n%s", p, b)
		}
	}
	if strings.Contains(string(b), "precision: exact") {
		t.Errorf("an exact tier's precision, the default, is written:\n%s", b)
	}
	for _, want := range []string{"count_when: success", "count_when: error", "cost_header: X-Tokens-Used"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("%q is not exported:\n%s", want, b)
		}
	}
	if n := strings.Count(string(b), "cost_header:"); n != 2 {
		t.Errorf("cost_header written %d times, want on the 2 tiers that have one:\n%s", n, b)
	}
	if !strings.Contains(string(b), "burst: 25") {
		t.Errorf("a bucket's burst is not exported:\n%s", b)
	}
}
