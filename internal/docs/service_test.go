package docs_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/docs"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/plans"
)

func TestRouteEndpoints(t *testing.T) {
	got := docs.RouteEndpoints([]string{"GET /invoices/{id}", "GET /files/{path...}", "GET /docs/{$}", "POST billing.example.com/pay"})
	want := []struct {
		path, example, host, op string
		params                  int
	}{
		{"/invoices/{id}", "/invoices/1", "", "get_invoices_id", 1},
		{"/files/{path}", "/files/a/b", "", "get_files_path", 1},
		{"/docs/", "/docs/", "", "get_docs", 0},
		{"/pay", "/pay", "billing.example.com", "post_pay", 0},
	}
	if len(got) != len(want) {
		t.Fatalf("%d endpoints", len(got))
	}
	for i, w := range want {
		e := got[i]
		if e.Path != w.path || e.ExamplePath != w.example || e.ExampleHost != w.host || e.OperationID != w.op || len(e.Params) != w.params || !e.Limited {
			t.Errorf("endpoint %d = %+v, want %+v", i, e, w)
		}
	}
}

// A declared service's docs document its routes with real examples of
// their tiers, and its OpenAPI document is titled for it.
func TestBuildForAService(t *testing.T) {
	routes := []string{"GET /invoices/{id}", "POST billing.example.com/pay"}
	ps := []plans.Plan{{Slug: "team", Name: "Team", IsPublic: true, Limits: []plans.Limit{
		{Name: "invoices", Route: "GET /invoices/{id}", Algorithm: enforce.FixedWindow, Limit: 2, Window: time.Minute, Cost: 1, Mode: enforce.ModeReject},
		{Name: "pay", Route: "POST billing.example.com/pay", Algorithm: enforce.FixedWindow, Limit: 1, Window: time.Minute, Cost: 1, Mode: enforce.ModeReject},
	}}}
	m, err := docs.Build(ps, docs.Options{Title: "Billing", Endpoints: docs.RouteEndpoints(routes)})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Endpoints) != 2 {
		t.Fatalf("%d endpoints, want 2", len(m.Endpoints))
	}
	for _, e := range m.Endpoints {
		ex := e.Plans[0].Examples
		if ex == nil || ex.First.Status != 200 || ex.Rejected == nil || ex.Rejected.Status != 429 {
			t.Errorf("%s: examples %+v, want 200 then 429", e.Route, ex)
		}
	}
	oa, err := docs.OpenAPI(m)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Info  struct{ Title string }
		Paths map[string]any
	}
	if err := json.Unmarshal(oa, &doc); err != nil || doc.Info.Title != "Billing" || doc.Paths["/invoices/{id}"] == nil {
		t.Errorf("OpenAPI title %q paths %v (%v)", doc.Info.Title, doc.Paths, err)
	}
	if md := docs.Markdown(m); !strings.Contains(md, "GET /invoices/{id}") {
		t.Error("Markdown leaves out the service's route")
	}
}
