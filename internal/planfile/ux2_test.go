package planfile_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/planfile"
)

// TestPlanFileCountPerAndDegrade: a tier's count_per is applied and
// exported (only where it departs from the usual rule), and a degrade tier
// on a portal route without a reduced answer is refused naming its line's
// field, as the dashboard refuses it.
func TestPlanFileCountPerAndDegrade(t *testing.T) {
	_, pool := seeded(t)
	s := planfile.NewStore(pool, append([]string{"GET /api/items/{id}", "GET /api/search"}, portalRoutes...)).
		WithReducedAnswers([]string{"GET /api/search"})
	ctx := context.Background()
	text := string(export(t, s, planfile.YAML))
	if strings.Contains(text, "count_per") {
		t.Fatalf("the export writes count_per for tiers on the usual rule:\n%s", text)
	}
	team := text + `  - slug: team
    name: Team
    limits:
      - name: invoices
        route: GET /invoices/{id}
        algorithm: fixed_window
        limit: 100
        window_seconds: 60
        count_per: developer
`
	p := decode(t, "team.yaml", []byte(team))
	d, err := s.Diff(ctx, p, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(ctx, p, planfile.Options{Base: d.Base, Actor: "user:1"}); err != nil {
		t.Fatal(err)
	}
	if out := string(export(t, s, planfile.YAML)); !strings.Contains(out, "count_per: developer") {
		t.Errorf("export lost count_per:\n%s", out)
	}
	if again, err := s.Diff(ctx, decode(t, "team.yaml", []byte(team)), false); err != nil || !again.Empty() {
		t.Errorf("diff after apply: %v %s", err, again)
	}

	degrade := text + `  - slug: lite
    name: Lite
    limits:
      - name: items
        route: GET /api/items/{id}
        algorithm: fixed_window
        limit: 100
        window_seconds: 60
        mode: degrade
`
	_, err = s.Diff(ctx, decode(t, "lite.yaml", []byte(degrade)), false)
	var fe *planfile.Error
	if !errors.As(err, &fe) {
		t.Fatalf("degrade on items: %v, want a *planfile.Error", err)
	}
	found := false
	for _, pr := range fe.Problems {
		found = found || (strings.HasSuffix(pr.Field, "limits[0].mode") && strings.Contains(pr.Message, "reduced answer") && pr.Line > 0)
	}
	if !found {
		t.Errorf("problems %+v lack limits[0].mode with its line", fe.Problems)
	}
}
