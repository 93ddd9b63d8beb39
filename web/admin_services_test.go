package web_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"

	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/services"
)

func fieldErrorsOf(d *goquery.Document) map[string]string {
	got := map[string]string{}
	d.Find(`.field-error`).Each(func(_ int, s *goquery.Selection) {
		id, _ := s.Attr("data-testid")
		got[strings.TrimPrefix(id, "error-")] = strings.TrimSpace(s.Text())
	})
	return got
}

func TestServicesDashboard(t *testing.T) {
	e := newEnv(t)
	c := e.signedIn(operatorEmail)
	repo := services.NewRepo(e.pool)
	ctx := context.Background()

	t.Run("ListsTheDemoService", func(t *testing.T) {
		res := c.get("/admin/services", nil)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("status %d", res.StatusCode)
		}
		row := res.doc(t).Find(`[data-testid="service-row"][data-service="demo"]`)
		if row.Length() != 1 || strings.TrimSpace(row.Find(`[data-testid="service-routes"]`).Text()) != "4" {
			t.Errorf("demo row: %q", row.Text())
		}
	})

	t.Run("RefusesBadRoutesByLine", func(t *testing.T) {
		form := url.Values{"slug": {"billing"}, "name": {"Billing"},
			"routes": {"GET /invoices/{id}\n\nGET /invoices/{name}\n/nomethod"}}
		res := c.post("/admin/services", form, nil)
		if res.StatusCode != http.StatusUnprocessableEntity {
			t.Fatalf("status %d, want 422", res.StatusCode)
		}
		got := fieldErrorsOf(res.doc(t))["routes"]
		if !strings.Contains(got, "line 2: ") || !strings.Contains(got, "conflicts with pattern") || !strings.Contains(got, "line 3: ") || !strings.Contains(got, "needs a method") {
			t.Errorf("routes error %q: want lines 2 and 3 with their reasons", got)
		}
		if _, err := repo.Get(ctx, "billing"); err == nil {
			t.Error("the refused service was stored")
		}
	})

	t.Run("CreateEditDelete", func(t *testing.T) {
		form := url.Values{"slug": {"billing"}, "name": {"Billing"}, "hosts": {"billing.example.com"},
			"upstream_url": {"http://10.0.0.5:8080"}, "routes": {"GET /invoices/{id}\nPOST /invoices"}}
		res := c.post("/admin/services", form, nil)
		if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/admin/services/billing" {
			t.Fatalf("create: status %d Location %q", res.StatusCode, res.Header.Get("Location"))
		}
		s, err := repo.Get(ctx, "billing")
		if err != nil || len(s.Routes) != 2 || s.Hosts[0] != "billing.example.com" {
			t.Fatalf("stored %+v, %v", s, err)
		}
		res = c.get("/admin/services/billing", nil)
		if v, _ := res.doc(t).Find(`[data-testid="service-routes-input"]`).Html(); !strings.Contains(v, "POST /invoices") {
			t.Errorf("edit form routes %q", v)
		}
		form.Set("version", "1")
		form.Set("routes", "GET /invoices/{id}")
		if res := c.post("/admin/services/billing", form, nil); res.StatusCode != http.StatusSeeOther {
			t.Fatalf("update: status %d", res.StatusCode)
		}
		if res := c.post("/admin/services/billing", form, nil); res.StatusCode != http.StatusConflict {
			t.Errorf("stale update: status %d, want 409", res.StatusCode)
		}
		if res := c.post("/admin/services/billing/delete", url.Values{}, nil); res.StatusCode != http.StatusSeeOther {
			t.Fatalf("delete: status %d", res.StatusCode)
		}
		if _, err := repo.Get(ctx, "billing"); err == nil {
			t.Error("deleted service still stored")
		}
	})

	t.Run("DevelopersCannotSeeIt", func(t *testing.T) {
		res := e.signedIn(developerEmail).get("/admin/services", nil)
		if res.StatusCode != http.StatusForbidden {
			t.Errorf("developer: status %d, want 403", res.StatusCode)
		}
	})
}

func TestServiceDocs(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if _, err := services.NewRepo(e.pool).Create(ctx, "test", services.Input{Slug: "billing", Name: "Billing API",
		Routes: []string{"GET /invoices/{id}"}}); err != nil {
		t.Fatal(err)
	}
	e.createPlan("team", plans.LimitInput{Name: "invoices", Route: "GET /invoices/{id}", Algorithm: "fixed_window", Limit: 3, WindowSeconds: 60})
	c := e.anonymous()

	res := c.get("/docs/services/billing", nil)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("HTML: status %d", res.StatusCode)
	}
	d := res.doc(t)
	if title := d.Find("title").Text(); !strings.Contains(title, "Billing API") {
		t.Errorf("title %q", title)
	}
	if !strings.Contains(d.Text(), "GET /invoices/{id}") || !strings.Contains(d.Text(), "team-invoices") {
		t.Error("the page leaves out the service's route or its tier")
	}
	if strings.Contains(d.Text(), "GET /api/search") {
		t.Error("the service's page documents the sample API")
	}
	res = c.get("/docs/services/billing/openapi.json", nil)
	body := res.body
	if res.StatusCode != http.StatusOK || !strings.Contains(body, `"title": "Billing API"`) || !strings.Contains(body, `/invoices/{id}`) {
		t.Errorf("OpenAPI: status %d body %.200s", res.StatusCode, body)
	}
	res = c.get("/docs/services/billing/limits.md", nil)
	if body := res.body; res.StatusCode != http.StatusOK || !strings.Contains(body, "GET /invoices/{id}") {
		t.Errorf("Markdown: status %d", res.StatusCode)
	}
	if res := c.get("/docs/services/nope", nil); res.StatusCode != http.StatusNotFound {
		t.Errorf("unknown service: status %d, want 404", res.StatusCode)
	}
}
