package services_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/audit"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/services"
	"github.com/sluicehq/sluice/internal/testenv"
)

const actor = "user:1"

func TestRepo(t *testing.T) {
	pool := testenv.Postgres(t)
	repo := services.NewRepo(pool)
	ctx := context.Background()

	t.Run("DemoServiceMigrated", func(t *testing.T) {
		demo, err := repo.Get(ctx, services.DemoSlug)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"GET /api/search", "GET /api/items/{id}", "POST /api/reports", "GET /api/jobs/{id}"}
		if !slices.Equal(demo.Routes, want) {
			t.Errorf("demo routes = %q, want %q", demo.Routes, want)
		}
	})

	billing, err := repo.Create(ctx, actor, services.Input{Slug: "billing", Name: "Billing",
		Hosts: []string{"Billing.Example.com"}, Upstream: "http://127.0.0.1:9",
		Routes: []string{"GET /invoices/{id}", "POST /invoices"}})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if billing.Hosts[0] != "billing.example.com" || billing.Version != 1 || len(billing.Routes) != 2 {
		t.Errorf("created %+v", billing)
	}
	es, err := audit.List(ctx, pool, audit.Filter{Limit: 1})
	if err != nil || len(es) != 1 || es[0].Action != "service.create" || es[0].ObjectType != audit.ObjectService {
		t.Errorf("audit = %+v, %v; want a service.create entry", es, err)
	}

	t.Run("ConflictWithAnotherService", func(t *testing.T) {
		_, err := repo.Create(ctx, actor, services.Input{Slug: "other", Name: "Other",
			Routes: []string{"GET /ok", "GET /invoices/{name}"}, Hosts: []string{"billing.example.com"}})
		var ve *plans.ValidationError
		if !errors.As(err, &ve) || !ve.Has("routes[1]") || ve.Has("routes[0]") || !ve.Has("hosts[0]") {
			t.Fatalf("Create = %v; want routes[1] and hosts[0] refused", err)
		}
		if _, err := repo.Get(ctx, "other"); !errors.Is(err, services.ErrNotFound) {
			t.Errorf("refused service was stored: %v", err)
		}
	})

	t.Run("SlugTaken", func(t *testing.T) {
		_, err := repo.Create(ctx, actor, services.Input{Slug: "billing", Name: "Again"})
		if !errors.Is(err, services.ErrSlugTaken) {
			t.Errorf("Create = %v, want ErrSlugTaken", err)
		}
	})

	t.Run("StaleVersion", func(t *testing.T) {
		_, err := repo.Update(ctx, actor, "billing", billing.Version+1, services.Input{Slug: "billing", Name: "B"})
		if !errors.Is(err, services.ErrConflict) {
			t.Errorf("Update = %v, want ErrConflict", err)
		}
	})

	t.Run("TierNamesDeclaredRoute", func(t *testing.T) {
		ps := plans.NewService(pool, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
		in := plans.PlanInput{Slug: "inv", Name: "Inv", Limits: []plans.LimitInput{{Name: "read",
			Route: "GET /invoices/{id}", Algorithm: string(enforce.FixedWindow), Limit: 5, WindowSeconds: 60}}}
		if _, err := ps.Create(ctx, actor, in); err != nil {
			t.Fatalf("a tier on a declared route: %v", err)
		}
		in.Slug, in.Limits[0].Route = "undeclared", "GET /nowhere"
		var ve *plans.ValidationError
		if _, err := ps.Create(ctx, actor, in); !errors.As(err, &ve) || !ve.Has("limits[0].route") {
			t.Errorf("a tier on an undeclared route: %v", err)
		}
		// A key's override may name a declared route too.
		var dev int64
		if err := pool.QueryRow(ctx, `INSERT INTO users (email, password_hash, role) VALUES ('o@example.com', 'x', 'developer') RETURNING id`).Scan(&dev); err != nil {
			t.Fatal(err)
		}
		keys := apikeys.NewService(pool, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
		override := plans.LimitInput{Name: "read", Route: "GET /invoices/{id}", Algorithm: string(enforce.FixedWindow), Limit: 9, WindowSeconds: 60}
		if _, _, err := keys.Create(ctx, actor, apikeys.NewKey{UserID: dev, Name: "k", Overrides: []plans.LimitInput{override}}); err != nil {
			t.Errorf("an override on a declared route: %v", err)
		}
		override.Route = "GET /nowhere"
		if _, _, err := keys.Create(ctx, actor, apikeys.NewKey{UserID: dev, Name: "k2", Overrides: []plans.LimitInput{override}}); !errors.As(err, &ve) || !ve.Has("overrides[0].route") {
			t.Errorf("an override on an undeclared route: %v", err)
		}
		// The route a tier names cannot be removed, nor its service deleted.
		_, err := repo.Update(ctx, actor, "billing", billing.Version, services.Input{Slug: "billing", Name: "Billing",
			Routes: []string{"POST /invoices"}})
		if !errors.Is(err, services.ErrRouteInUse) {
			t.Errorf("removing a named route: %v, want ErrRouteInUse", err)
		}
		if err := repo.Delete(ctx, actor, "billing"); !errors.Is(err, services.ErrRouteInUse) {
			t.Errorf("Delete = %v, want ErrRouteInUse", err)
		}
	})

	t.Run("UpdateAndDelete", func(t *testing.T) {
		s, err := repo.Create(ctx, actor, services.Input{Slug: "search", Name: "Search", Routes: []string{"GET /q"}})
		if err != nil {
			t.Fatal(err)
		}
		s, err = repo.Update(ctx, actor, "search", s.Version, services.Input{Slug: "search", Name: "Search v2",
			Routes: []string{"GET /q", "GET /suggest"}})
		if err != nil || s.Version != 2 || len(s.Routes) != 2 || !s.UpdatedAt.After(s.CreatedAt.Add(-time.Second)) {
			t.Fatalf("Update = %+v, %v", s, err)
		}
		if err := repo.Delete(ctx, actor, "search"); err != nil {
			t.Fatal(err)
		}
		if _, err := repo.Get(ctx, "search"); !errors.Is(err, services.ErrNotFound) {
			t.Errorf("Get after Delete = %v", err)
		}
		if err := repo.Delete(ctx, actor, "search"); !errors.Is(err, services.ErrNotFound) {
			t.Errorf("second Delete = %v, want ErrNotFound", err)
		}
	})
}
