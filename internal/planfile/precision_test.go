package planfile_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/planfile"
)

// TestPlanFilePrecision: a tier's precision is applied, shown in a diff,
// exported (only where it is not exact, the default), and a precision the
// engine refuses for the tier's algorithm is refused naming the rule, the
// field and its line, before anything is written (the schema knows the
// three values; the rules per algorithm are the plans package's, as the
// dashboard's).
func TestPlanFilePrecision(t *testing.T) {
	_, pool := seeded(t)
	s := planfile.NewStore(pool, append([]string{"GET /api/items/{id}", "GET /api/search"}, portalRoutes...))
	ctx := context.Background()
	text := string(export(t, s, planfile.YAML))
	team := func(algorithm, precision string) string {
		return text + `  - slug: team
    name: Team
    limits:
      - name: invoices
        route: GET /invoices/{id}
        algorithm: ` + algorithm + `
        limit: 2000
        window_seconds: 60
        precision: ` + precision + "\n"
	}
	p := decode(t, "team.yaml", []byte(team("sliding_window_log", "leased")))
	d, err := s.Diff(ctx, p, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(ctx, p, planfile.Options{Base: d.Base, Actor: "user:1"}); err != nil {
		t.Fatal(err)
	}
	out := string(export(t, s, planfile.YAML))
	if !strings.Contains(out, "precision: leased") {
		t.Errorf("export lost precision:\n%s", out)
	}
	var stored string
	if err := pool.QueryRow(ctx, `SELECT l.precision FROM plan_limits l JOIN plans p ON p.id = l.plan_id WHERE p.slug = 'team'`).Scan(&stored); err != nil || stored != string(enforce.PrecisionLeased) {
		t.Errorf("stored precision %q, %v; want leased", stored, err)
	}
	if again, err := s.Diff(ctx, decode(t, "team.yaml", []byte(team("sliding_window_log", "leased"))), false); err != nil || !again.Empty() {
		t.Errorf("diff after apply: %v %s", err, again)
	}

	t.Run("ChangeShowsInTheDiff", func(t *testing.T) {
		d, err := s.Diff(ctx, decode(t, "team.yaml", []byte(team("sliding_window_log", "local"))), false)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(d.String(), `limits[invoices].precision: "leased" -> "local"`) {
			t.Errorf("diff:\n%s", d)
		}
		// Saying exact is saying nothing: the export leaves it out, so
		// a file that says it must diff against one that does not as a
		// change from leased only.
		d, err = s.Diff(ctx, decode(t, "team.yaml", []byte(team("sliding_window_log", "exact"))), false)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(d.String(), `limits[invoices].precision: "leased" -> "exact"`) {
			t.Errorf("diff:\n%s", d)
		}
	})

	t.Run("ErrRefusedNamingTheRule", func(t *testing.T) {
		for _, tc := range []struct {
			name, algorithm, precision, rule string
		}{
			{"LeasedConcurrency", "concurrency", "leased", "always exact"},
			{"LocalQuota", "quota\n        period: month", "local", "a quota is always exact"},
			{"LeasedQuota", "quota\n        period: month", "leased", "a quota is always exact"},
			{"LeasedQueue", "leaky_bucket\n        mode: queue\n        burst: 5", "leased", "a leaky bucket that queues is always exact"},
			{"Unknown", "fixed_window", "roughly", `must be one of "", "exact", "leased", "local"`},
		} {
			t.Run(tc.name, func(t *testing.T) {
				var err error
				if p, derr := planfile.Decode("team.yaml", []byte(team(tc.algorithm, tc.precision))); derr != nil {
					err = derr
				} else {
					_, err = s.Diff(ctx, p, false)
				}
				var fe *planfile.Error
				if !errors.As(err, &fe) {
					t.Fatalf("Decode = %v, want a *planfile.Error", err)
				}
				found := false
				for _, pr := range fe.Problems {
					found = found || (strings.HasSuffix(pr.Field, "limits[0].precision") && strings.Contains(pr.Message, tc.rule) && pr.Line > 0)
				}
				if !found {
					t.Errorf("problems %+v lack limits[0].precision (%s) with its line", fe.Problems, tc.rule)
				}
				var n int
				if err := pool.QueryRow(ctx, `SELECT count(*) FROM plan_limits l JOIN plans p ON p.id = l.plan_id WHERE p.slug = 'team' AND l.precision = 'leased'`).Scan(&n); err != nil || n != 1 {
					t.Errorf("team's tier after a refused file: %d leased, %v", n, err)
				}
			})
		}
	})
}
