package web_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"

	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/services"
)

// TestAuditNamesLimitsAndServices: the audit log names a tier by its name
// (also once it is deleted) and a service by its slug, never "limit 18" or
// "service 2".
func TestAuditNamesLimitsAndServices(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	p := e.createPlan("team")
	p, err := e.plans.AddLimit(ctx, "test", p.ID, p.Version, plans.LimitInput{Name: "team-day", Algorithm: "quota", Period: "day", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	p, err = e.plans.AddLimit(ctx, "test", p.ID, p.Version, plans.LimitInput{Name: "burst", Algorithm: "fixed_window", Limit: 10, WindowSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	gone := p.Limits[1].ID
	if _, err := e.plans.DeleteLimit(ctx, "test", p.ID, p.Version, gone); err != nil {
		t.Fatal(err)
	}
	svc, err := services.NewRepo(e.pool).Create(ctx, "test", services.Input{Slug: "widgets", Name: "Widgets", Routes: []string{"GET /widgets/{id}"}})
	if err != nil {
		t.Fatal(err)
	}
	c := e.signedIn(operatorEmail)
	for _, tt := range []struct {
		query, want string
	}{
		{fmt.Sprintf("object_type=limit&object_id=%d", p.Limits[0].ID), "limit team-day"},
		{fmt.Sprintf("object_type=limit&object_id=%d", gone), "limit burst"},
		{fmt.Sprintf("object_type=service&object_id=%d", svc.ID), "service widgets"},
	} {
		d := c.get("/admin/audit?"+tt.query, nil).doc(t)
		rows := d.Find(`[data-testid="audit-row-object"]`)
		if rows.Length() == 0 {
			t.Errorf("%s: no entries", tt.query)
		}
		rows.Each(func(_ int, s *goquery.Selection) {
			if got := strings.TrimSpace(s.Text()); got != tt.want {
				t.Errorf("%s: object %q, want %q", tt.query, got, tt.want)
			}
		})
	}
}
