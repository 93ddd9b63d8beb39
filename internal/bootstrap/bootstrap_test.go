package bootstrap

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/users"
)

type counts struct{ users, operators, plans, limits, audit int }

func TestRun(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Postgres(t)
	read := func(t *testing.T) counts {
		t.Helper()
		var c counts
		err := pool.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM users),
			(SELECT count(*) FROM users WHERE role = 'operator'),
			(SELECT count(*) FROM plans),
			(SELECT count(*) FROM plan_limits),
			(SELECT count(*) FROM audit_log WHERE actor = 'bootstrap')`).Scan(&c.users, &c.operators, &c.plans, &c.limits, &c.audit)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	opts := Options{AdminEmail: "admin@localhost", Demo: true}

	first, err := Run(ctx, pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("FirstRunCreatesOperatorAndDemo", func(t *testing.T) {
		if !first.OperatorCreated || first.OperatorEmail != "admin@localhost" || len(first.GeneratedPassword) != 24 {
			t.Errorf("result = %+v, want operator created with a 24-character generated password", first)
		}
		if want := []string{"anonymous", "free", "pro"}; !slices.Equal(first.PlansCreated, want) {
			t.Errorf("PlansCreated = %v, want %v", first.PlansCreated, want)
		}
		got := read(t)
		want := counts{users: 1, operators: 1, plans: 3, limits: 14, audit: 1 + 3 + 14}
		if got != want {
			t.Errorf("rows = %+v, want %+v", got, want)
		}
		if _, err := users.NewRepo(pool).Authenticate(ctx, "admin@localhost", first.GeneratedPassword); err != nil {
			t.Errorf("cannot sign in with the generated password: %v", err)
		}
		var anon, def string
		if err := pool.QueryRow(ctx, `SELECT (SELECT slug FROM plans WHERE is_anonymous), (SELECT slug FROM plans WHERE is_default)`).Scan(&anon, &def); err != nil {
			t.Fatal(err)
		}
		if anon != "anonymous" || def != "free" {
			t.Errorf("anonymous plan %q, default plan %q; want anonymous, free", anon, def)
		}
		// One tier is leased, so a newcomer sees a precision other than
		// exact; every other tier is exact.
		var leased []string
		var exact int
		if err := pool.QueryRow(ctx, `SELECT
			(SELECT array_agg(p.slug || '-' || l.name) FROM plan_limits l JOIN plans p ON p.id = l.plan_id WHERE l.precision = 'leased'),
			(SELECT count(*) FROM plan_limits WHERE precision = 'exact')`).Scan(&leased, &exact); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(leased, []string{"pro-global"}) || exact != 13 {
			t.Errorf("leased tiers %v and %d exact ones, want pro-global alone and 13", leased, exact)
		}
	})

	t.Run("SecondRunChangesNothing", func(t *testing.T) {
		before := read(t)
		second, err := Run(ctx, pool, opts)
		if err != nil {
			t.Fatal(err)
		}
		if second.OperatorCreated || second.GeneratedPassword != "" || second.PlansCreated != nil {
			t.Errorf("second result = %+v, want nothing created", second)
		}
		if after := read(t); after != before {
			t.Errorf("rows changed: %+v -> %+v", before, after)
		}
	})

	t.Run("DeletedDemoPlansStayDeleted", func(t *testing.T) {
		if _, err := pool.Exec(ctx, "DELETE FROM plans"); err != nil {
			t.Fatal(err)
		}
		res, err := Run(ctx, pool, opts)
		if err != nil {
			t.Fatal(err)
		}
		if res.PlansCreated != nil {
			t.Errorf("PlansCreated = %v after the operator deleted them, want none", res.PlansCreated)
		}
	})

	t.Run("ConfiguredOperatorWithPassword", func(t *testing.T) {
		res, err := Run(ctx, pool, Options{AdminEmail: "ops@example.com", AdminPassword: "configured password"})
		if err != nil {
			t.Fatal(err)
		}
		if !res.OperatorCreated || res.GeneratedPassword != "" {
			t.Errorf("result = %+v, want created without a generated password", res)
		}
		u, err := users.NewRepo(pool).Authenticate(ctx, "ops@example.com", "configured password")
		if err != nil || u.Role != users.RoleOperator {
			t.Errorf("Authenticate = %+v, %v; want an operator", u, err)
		}
	})

	t.Run("BadPasswordCreatesNothing", func(t *testing.T) {
		before := read(t)
		_, err := Run(ctx, pool, Options{AdminEmail: "new@example.com", AdminPassword: "short", Demo: true})
		var fe users.FieldErrors
		if !errors.As(err, &fe) || fe["password"] == "" {
			t.Errorf("error = %v, want a password FieldError", err)
		}
		if after := read(t); after != before {
			t.Errorf("rows changed on failure: %+v -> %+v", before, after)
		}
	})
}

func TestNoDemo(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Postgres(t)
	res, err := Run(ctx, pool, Options{AdminEmail: "admin@localhost"})
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM plans").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 || res.PlansCreated != nil || !res.OperatorCreated {
		t.Errorf("plans = %d, result %+v; want no plans and an operator", n, res)
	}
}

// TestDemoPlansAreValid holds the seed to the same rules as plans edited in
// the UI, on the sample API's routes.
func TestDemoPlansAreValid(t *testing.T) {
	routes := []string{routeSearch, routeItem, routeReports}
	for _, p := range demoPlans {
		t.Run(p.Slug, func(t *testing.T) {
			in := plans.PlanInput{Slug: p.Slug, Name: p.Name, Description: p.Description,
				IsDefault: p.IsDefault, IsAnonymous: p.IsAnonymous, IsPublic: true}
			for _, l := range p.Limits {
				in.Limits = append(in.Limits, plans.LimitInput{Name: l.Name, Route: l.Route, Algorithm: l.Algorithm,
					Mode: l.Mode, Limit: l.Limit, WindowSeconds: l.WindowMS / 1000, Burst: l.Burst, Cost: int64(l.Cost), Period: l.Period})
			}
			if err := plans.Validate(in, routes); err != nil {
				t.Errorf("demo plan %s is invalid: %v", p.Slug, err)
			}
		})
	}
}
