package plans_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/audit"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/testenv"
)

const actor = "user:1"

func newService(t *testing.T) (*plans.Service, *pgxpool.Pool) {
	t.Helper()
	pool := testenv.Postgres(t)
	return plans.NewService(pool, testRoutes, slog.New(slog.NewTextHandler(io.Discard, nil))), pool
}

func mustCreate(t *testing.T, s *plans.Service, in plans.PlanInput) plans.Plan {
	t.Helper()
	p, err := s.Create(context.Background(), actor, in)
	if err != nil {
		t.Fatalf("Create(%s): %v", in.Slug, err)
	}
	return p
}

func countRows(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func lastAudit(t *testing.T, pool *pgxpool.Pool) audit.Entry {
	t.Helper()
	es, err := audit.List(context.Background(), pool, audit.Filter{Limit: 1})
	if err != nil || len(es) != 1 {
		t.Fatalf("audit.List = %v, %v; want one entry", es, err)
	}
	return es[0]
}

func TestCreateAndGet(t *testing.T) {
	s, pool := newService(t)
	ctx := context.Background()
	in := validPlan()
	in.IsDefault = true
	p := mustCreate(t, s, in)

	if p.ID == 0 || p.Slug != "pro" || p.Name != "Pro" || p.Description != "For production use" ||
		!p.IsDefault || p.IsAnonymous || !p.IsPublic || p.Version != 1 || p.CreatedAt.IsZero() || p.UpdatedAt.IsZero() {
		t.Fatalf("created plan = %+v", p)
	}
	want := []plans.Limit{
		{Name: "global", Route: "", Algorithm: enforce.TokenBucket, Limit: 1000, Window: time.Hour, Burst: 50, Cost: 1, Mode: enforce.ModeReject, CountPer: "developer", Precision: enforce.PrecisionExact, Position: 0, CountWhen: enforce.CountAlways},
		{Name: "search", Route: "GET /api/search", Algorithm: enforce.FixedWindow, Limit: 100, Window: time.Minute, Burst: 0, Cost: 1, Mode: enforce.ModeReject, CountPer: "key", Precision: enforce.PrecisionExact, Position: 1, CountWhen: enforce.CountAlways},
	}
	if len(p.Limits) != len(want) {
		t.Fatalf("limits = %+v, want %+v", p.Limits, want)
	}
	for i, l := range p.Limits {
		if l.ID == 0 {
			t.Errorf("limit %d has no id", i)
		}
		l.ID = 0
		if l != want[i] {
			t.Errorf("limit %d = %+v, want %+v", i, l, want[i])
		}
	}

	got, err := s.Get(ctx, p.ID)
	if err != nil || got.Slug != "pro" || len(got.Limits) != 2 || got.Version != 1 {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	bySlug, err := s.GetBySlug(ctx, "pro")
	if err != nil || bySlug.ID != p.ID {
		t.Fatalf("GetBySlug = %+v, %v", bySlug, err)
	}
	list, err := s.List(ctx)
	if err != nil || len(list) != 1 || list[0].ID != p.ID || len(list[0].Limits) != 2 {
		t.Fatalf("List = %+v, %v", list, err)
	}

	e := lastAudit(t, pool)
	if e.Actor != actor || e.Action != "plan.create" || e.ObjectType != "plan" || e.Before != nil || len(e.After) == 0 {
		t.Fatalf("audit entry = %+v", e)
	}
	var after plans.Plan
	if err := json.Unmarshal(e.After, &after); err != nil || after.Slug != "pro" || len(after.Limits) != 2 || after.Limits[1].Window != time.Minute {
		t.Fatalf("audit after = %s (%v)", e.After, err)
	}
}

func TestNotFound(t *testing.T) {
	s, _ := newService(t)
	ctx := context.Background()
	if _, err := s.Get(ctx, 9999); !errors.Is(err, plans.ErrNotFound) {
		t.Errorf("Get(missing) = %v, want ErrNotFound", err)
	}
	if _, err := s.GetBySlug(ctx, "nope"); !errors.Is(err, plans.ErrNotFound) {
		t.Errorf("GetBySlug(missing) = %v, want ErrNotFound", err)
	}
	if _, err := s.Update(ctx, actor, 9999, 1, validPlan()); !errors.Is(err, plans.ErrNotFound) {
		t.Errorf("Update(missing) = %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx, actor, 9999); !errors.Is(err, plans.ErrNotFound) {
		t.Errorf("Delete(missing) = %v, want ErrNotFound", err)
	}
	p := mustCreate(t, s, validPlan())
	if _, err := s.UpdateLimit(ctx, actor, p.ID, p.Version, 9999, validTier()); !errors.Is(err, plans.ErrNotFound) {
		t.Errorf("UpdateLimit(missing limit) = %v, want ErrNotFound", err)
	}
	if _, err := s.DeleteLimit(ctx, actor, p.ID, p.Version, 9999); !errors.Is(err, plans.ErrNotFound) {
		t.Errorf("DeleteLimit(missing limit) = %v, want ErrNotFound", err)
	}
}

func TestCreateRefusals(t *testing.T) {
	s, pool := newService(t)
	ctx := context.Background()
	mustCreate(t, s, validPlan())

	t.Run("ErrSlugTaken", func(t *testing.T) {
		in := validPlan()
		in.Name = "Another"
		if _, err := s.Create(ctx, actor, in); !errors.Is(err, plans.ErrSlugTaken) {
			t.Fatalf("Create(duplicate slug) = %v, want ErrSlugTaken", err)
		}
	})
	t.Run("ValidationWritesNothing", func(t *testing.T) {
		in := validPlan()
		in.Slug = "other"
		in.Limits[1].WindowSeconds = 0
		var ve *plans.ValidationError
		if _, err := s.Create(ctx, actor, in); !errors.As(err, &ve) || !ve.Has("limits[1].window_seconds") {
			t.Fatalf("Create(invalid) = %v, want field error on limits[1].window_seconds", err)
		}
		if n := countRows(t, pool, "SELECT count(*) FROM plans WHERE slug = 'other'"); n != 0 {
			t.Fatalf("%d plans written by an invalid create", n)
		}
	})
	if n := countRows(t, pool, "SELECT count(*) FROM audit_log"); n != 1 {
		t.Fatalf("audit entries = %d, want 1 (refused creates leave none)", n)
	}
}

func TestUpdate(t *testing.T) {
	s, pool := newService(t)
	ctx := context.Background()
	p := mustCreate(t, s, validPlan())
	searchID := p.Limits[1].ID

	in := p.Input()
	in.Name = "Pro 2"
	in.Limits = []plans.LimitInput{in.Limits[1], {Name: "items", Route: "GET /api/items/{id}", Algorithm: "sliding_window_counter", Limit: 5, WindowSeconds: 1}}
	in.Limits[0].Limit = 200

	t.Run("ReplacesFieldsAndLimitsKeepingIDs", func(t *testing.T) {
		u, err := s.Update(ctx, actor, p.ID, p.Version, in)
		if err != nil {
			t.Fatalf("Update: %v", err)
		}
		if u.Version != 2 || u.Name != "Pro 2" || len(u.Limits) != 2 {
			t.Fatalf("updated = %+v", u)
		}
		if u.Limits[0].ID != searchID || u.Limits[0].Name != "search" || u.Limits[0].Limit != 200 || u.Limits[0].Position != 0 {
			t.Errorf("search tier = %+v, want id %d kept, limit 200, position 0", u.Limits[0], searchID)
		}
		if u.Limits[1].Name != "items" || u.Limits[1].Window != time.Second || u.Limits[1].Cost != 1 || u.Limits[1].Mode != enforce.ModeReject {
			t.Errorf("items tier = %+v", u.Limits[1])
		}
		if n := countRows(t, pool, "SELECT count(*) FROM plan_limits WHERE plan_id = $1 AND name = 'global'", p.ID); n != 0 {
			t.Errorf("removed tier still stored")
		}
		e := lastAudit(t, pool)
		var before, after plans.Plan
		if e.Action != "plan.update" || json.Unmarshal(e.Before, &before) != nil || json.Unmarshal(e.After, &after) != nil ||
			before.Name != "Pro" || after.Name != "Pro 2" || before.Version != 1 || after.Version != 2 {
			t.Errorf("audit entry = %+v", e)
		}
	})
	t.Run("ErrConflictOnStaleVersion", func(t *testing.T) {
		in.Name = "Stale"
		if _, err := s.Update(ctx, actor, p.ID, p.Version, in); !errors.Is(err, plans.ErrConflict) {
			t.Fatalf("Update(stale) = %v, want ErrConflict", err)
		}
		got, _ := s.Get(ctx, p.ID)
		if got.Name != "Pro 2" || got.Version != 2 {
			t.Fatalf("stale update changed the plan: %+v", got)
		}
	})
	t.Run("ErrSlugTaken", func(t *testing.T) {
		other := validPlan()
		other.Slug = "free"
		o := mustCreate(t, s, other)
		oin := o.Input()
		oin.Slug = "pro"
		if _, err := s.Update(ctx, actor, o.ID, o.Version, oin); !errors.Is(err, plans.ErrSlugTaken) {
			t.Fatalf("Update(taken slug) = %v, want ErrSlugTaken", err)
		}
	})
	t.Run("ValidationError", func(t *testing.T) {
		bad := in
		bad.Slug = ""
		var ve *plans.ValidationError
		if _, err := s.Update(ctx, actor, p.ID, 2, bad); !errors.As(err, &ve) || !ve.Has("slug") {
			t.Fatalf("Update(invalid) = %v, want field error on slug", err)
		}
	})
}

func TestRoles(t *testing.T) {
	s, pool := newService(t)
	ctx := context.Background()
	a := validPlan()
	a.Slug, a.IsDefault, a.IsAnonymous = "a", true, true
	pa := mustCreate(t, s, a)
	b := validPlan()
	b.Slug, b.IsDefault = "b", true
	pb := mustCreate(t, s, b)

	got, _ := s.Get(ctx, pa.ID)
	if got.IsDefault || !got.IsAnonymous || got.Version != 2 {
		t.Fatalf("plan a after b took default = %+v, want not default, still anonymous, version 2", got)
	}
	if !pb.IsDefault {
		t.Fatalf("plan b = %+v, want default", pb)
	}
	if n := countRows(t, pool, "SELECT count(*) FROM audit_log WHERE action = 'plan.update' AND object_id = $1", strconv.FormatInt(pa.ID, 10)); n != 1 {
		t.Errorf("un-defaulting was audited %d times, want 1", n)
	}
	bin := pb.Input()
	bin.IsAnonymous = true
	if _, err := s.Update(ctx, actor, pb.ID, pb.Version, bin); err != nil {
		t.Fatalf("Update(b anonymous): %v", err)
	}
	got, _ = s.Get(ctx, pa.ID)
	if got.IsAnonymous {
		t.Fatalf("plan a still anonymous after b took the role")
	}
}

func insertUser(t *testing.T, pool *pgxpool.Pool, email string, planID *int64) int64 {
	t.Helper()
	var id int64
	err := pool.QueryRow(context.Background(),
		`INSERT INTO users (email, password_hash, role, plan_id) VALUES ($1, 'x', 'developer', $2) RETURNING id`,
		email, planID).Scan(&id)
	if err != nil {
		t.Fatalf("insert user: %v", err)
	}
	return id
}

func TestDelete(t *testing.T) {
	s, pool := newService(t)
	ctx := context.Background()

	t.Run("RemovesPlanAndLimits", func(t *testing.T) {
		in := validPlan()
		in.Slug = "gone"
		p := mustCreate(t, s, in)
		if err := s.Delete(ctx, actor, p.ID); err != nil {
			t.Fatalf("Delete: %v", err)
		}
		if n := countRows(t, pool, "SELECT count(*) FROM plan_limits WHERE plan_id = $1", p.ID); n != 0 {
			t.Errorf("%d limits left", n)
		}
		e := lastAudit(t, pool)
		if e.Action != "plan.delete" || e.After != nil || len(e.Before) == 0 {
			t.Errorf("audit entry = %+v", e)
		}
	})
	t.Run("ErrInUseByDeveloper", func(t *testing.T) {
		in := validPlan()
		in.Slug = "dev-plan"
		p := mustCreate(t, s, in)
		insertUser(t, pool, "dev@example.com", &p.ID)
		if err := s.Delete(ctx, actor, p.ID); !errors.Is(err, plans.ErrInUse) {
			t.Fatalf("Delete(plan with developer) = %v, want ErrInUse", err)
		}
		counts, err := s.Counts(ctx)
		if err != nil || counts[p.ID] != (plans.PlanCounts{Keys: 0, Developers: 1, KeysOnPlan: 0, DevelopersOnPlan: 1}) {
			t.Fatalf("Counts = %v, %v", counts, err)
		}
	})
	t.Run("ErrInUseByKeyButNotByRevokedKey", func(t *testing.T) {
		in := validPlan()
		in.Slug = "key-plan"
		p := mustCreate(t, s, in)
		uid := insertUser(t, pool, "owner@example.com", nil)
		var keyID int64
		if err := pool.QueryRow(ctx, `INSERT INTO api_keys (user_id, name, plan_id) VALUES ($1, 'k', $2) RETURNING id`, uid, p.ID).Scan(&keyID); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(ctx, actor, p.ID); !errors.Is(err, plans.ErrInUse) {
			t.Fatalf("Delete(plan with live key) = %v, want ErrInUse", err)
		}
		counts, _ := s.Counts(ctx)
		if counts[p.ID] != (plans.PlanCounts{Keys: 1, Developers: 0, KeysOnPlan: 1, DevelopersOnPlan: 0}) {
			t.Fatalf("Counts[%d] = %+v, want 1 key", p.ID, counts[p.ID])
		}
		if _, err := pool.Exec(ctx, `UPDATE api_keys SET revoked_at = now() WHERE id = $1`, keyID); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(ctx, actor, p.ID); err != nil {
			t.Fatalf("Delete(plan with only a revoked key) = %v, want nil", err)
		}
	})
	t.Run("ErrInUseWhileDefault", func(t *testing.T) {
		in := validPlan()
		in.Slug, in.IsAnonymous = "anon", true
		p := mustCreate(t, s, in)
		if err := s.Delete(ctx, actor, p.ID); !errors.Is(err, plans.ErrInUse) {
			t.Fatalf("Delete(anonymous plan) = %v, want ErrInUse", err)
		}
	})
}

func TestLimitEdits(t *testing.T) {
	s, pool := newService(t)
	ctx := context.Background()
	p := mustCreate(t, s, validPlan())

	items := plans.LimitInput{Name: "items", Route: "GET /api/items/{id}", Algorithm: "leaky_bucket", Mode: "queue", Limit: 10, WindowSeconds: 1, Burst: 5}
	p2, err := s.AddLimit(ctx, actor, p.ID, p.Version, items)
	if err != nil {
		t.Fatalf("AddLimit: %v", err)
	}
	if p2.Version != p.Version+1 || len(p2.Limits) != 3 {
		t.Fatalf("after AddLimit = %+v", p2)
	}
	added := p2.Limits[2]
	if added.Name != "items" || added.Algorithm != enforce.LeakyBucket || added.Mode != enforce.ModeQueue || added.Burst != 5 || added.Position != 2 {
		t.Fatalf("added = %+v", added)
	}
	if e := lastAudit(t, pool); e.Action != "limit.create" || e.ObjectType != "limit" || e.Before != nil {
		t.Errorf("audit = %+v", e)
	}

	t.Run("AddLimitStaleVersion", func(t *testing.T) {
		if _, err := s.AddLimit(ctx, actor, p.ID, p.Version, items); !errors.Is(err, plans.ErrConflict) {
			t.Fatalf("AddLimit(stale) = %v, want ErrConflict", err)
		}
	})
	t.Run("AddLimitDuplicateNamesOwnField", func(t *testing.T) {
		dup := items
		dup.WindowSeconds = 2
		var ve *plans.ValidationError
		_, err := s.AddLimit(ctx, actor, p.ID, p2.Version, dup)
		if !errors.As(err, &ve) || len(ve.Fields) != 1 || ve.Fields[0].Field != "name" {
			t.Fatalf("AddLimit(duplicate name) = %v, want one error on name", err)
		}
	})
	t.Run("AddLimitInvalidNamesOwnField", func(t *testing.T) {
		bad := items
		bad.Name = "other"
		bad.WindowSeconds = 0
		var ve *plans.ValidationError
		_, err := s.AddLimit(ctx, actor, p.ID, p2.Version, bad)
		if !errors.As(err, &ve) || len(ve.Fields) != 1 || ve.Fields[0].Field != "window_seconds" {
			t.Fatalf("AddLimit(window 0) = %v, want one error on window_seconds", err)
		}
	})

	changed := items
	changed.Limit = 20
	p3, err := s.UpdateLimit(ctx, actor, p.ID, p2.Version, added.ID, changed)
	if err != nil {
		t.Fatalf("UpdateLimit: %v", err)
	}
	if p3.Version != p2.Version+1 || p3.Limits[2].ID != added.ID || p3.Limits[2].Limit != 20 {
		t.Fatalf("after UpdateLimit = %+v", p3)
	}
	if e := lastAudit(t, pool); e.Action != "limit.update" || e.Before == nil || e.After == nil {
		t.Errorf("audit = %+v", e)
	}
	t.Run("UpdateLimitStaleVersion", func(t *testing.T) {
		if _, err := s.UpdateLimit(ctx, actor, p.ID, p2.Version, added.ID, changed); !errors.Is(err, plans.ErrConflict) {
			t.Fatalf("UpdateLimit(stale) = %v, want ErrConflict", err)
		}
	})

	p4, err := s.DeleteLimit(ctx, actor, p.ID, p3.Version, added.ID)
	if err != nil {
		t.Fatalf("DeleteLimit: %v", err)
	}
	if p4.Version != p3.Version+1 || len(p4.Limits) != 2 {
		t.Fatalf("after DeleteLimit = %+v", p4)
	}
	if e := lastAudit(t, pool); e.Action != "limit.delete" || e.After != nil {
		t.Errorf("audit = %+v", e)
	}
	t.Run("DeleteLimitStaleVersion", func(t *testing.T) {
		if _, err := s.DeleteLimit(ctx, actor, p.ID, p3.Version, p4.Limits[0].ID); !errors.Is(err, plans.ErrConflict) {
			t.Fatalf("DeleteLimit(stale) = %v, want ErrConflict", err)
		}
	})
}

func TestLimitEnforce(t *testing.T) {
	l := plans.Limit{Name: "search", Route: "GET /api/search", Algorithm: enforce.TokenBucket, Limit: 10,
		Window: time.Minute, Burst: 20, Cost: 2, Mode: enforce.ModeDegrade}
	got := l.Enforce("pro")
	want := enforce.Limit{Name: "pro-search", Algorithm: enforce.TokenBucket, Limit: 10, Window: time.Minute,
		Burst: 20, Cost: 2, Mode: enforce.ModeDegrade, Route: "GET /api/search", PerKey: true}
	if got != want {
		t.Fatalf("Enforce = %+v, want %+v (an endpoint tier counts per key)", got, want)
	}
	if in := l.Input().Enforce("pro"); in != want {
		t.Fatalf("Input().Enforce = %+v, want %+v", in, want)
	}
	l.Route = ""
	if got := l.Enforce("pro"); got.PerKey {
		t.Fatalf("plan-wide Enforce = %+v, want PerKey false: the developer's keys share it", got)
	}
	if got := l.Input().Enforce("pro"); !got.PerKey {
		t.Fatalf("plan-wide override Enforce = %+v, want PerKey true: a key's own override counts for it alone", got)
	}
}

func TestConcurrentEditsOneWins(t *testing.T) {
	s, _ := newService(t)
	ctx := context.Background()
	p := mustCreate(t, s, validPlan())
	const editors = 8
	errs := make(chan error, editors)
	for i := range editors {
		go func() {
			in := p.Input()
			in.Name = "Editor " + strconv.Itoa(i)
			_, err := s.Update(ctx, actor, p.ID, p.Version, in)
			errs <- err
		}()
	}
	won, conflicts := 0, 0
	for range editors {
		switch err := <-errs; {
		case err == nil:
			won++
		case errors.Is(err, plans.ErrConflict):
			conflicts++
		default:
			t.Fatalf("Update: %v", err)
		}
	}
	got, _ := s.Get(ctx, p.ID)
	if won != 1 || conflicts != editors-1 || got.Version != 2 {
		t.Fatalf("%d won, %d conflicts, version %d; want 1, %d, 2", won, conflicts, got.Version, editors-1)
	}
}

func ExampleValidate() {
	in := plans.PlanInput{Slug: "Pro Plan", Name: "Pro", Limits: []plans.LimitInput{
		{Name: "search", Route: "GET /api/search", Algorithm: "token_bucket", Limit: 10, WindowSeconds: 0, Burst: 20},
		{Name: "search", Route: "GET /api/nope", Algorithm: "fixed_window", Mode: "queue", Limit: 5, WindowSeconds: 60},
	}}
	err := plans.Validate(in, []string{"GET /api/search"})
	var ve *plans.ValidationError
	if errors.As(err, &ve) {
		for _, f := range ve.Fields {
			fmt.Println(f.Field)
		}
	}
	// Output:
	// slug
	// limits[0].window_seconds
	// limits[1].route
	// limits[1].mode
	// limits[1].name
}

func TestApplyOverrides(t *testing.T) {
	p := plans.Plan{Slug: "pro", Limits: []plans.Limit{
		{Name: "global", Algorithm: enforce.FixedWindow, Limit: 100, Window: time.Hour, Cost: 1, Mode: enforce.ModeReject},
		{Name: "search", Route: "GET /api/search", Algorithm: enforce.FixedWindow, Limit: 10, Window: time.Minute, Cost: 1, Mode: enforce.ModeReject},
	}}
	base := p.EnforceLimits()
	t.Run("NoOverridesSharesBase", func(t *testing.T) {
		got := plans.ApplyOverrides("pro", base, nil)
		if len(got) != 2 || &got[0] != &base[0] {
			t.Fatalf("ApplyOverrides(nil) copied or changed the base: %+v", got)
		}
	})
	t.Run("ReplacesSameNameAndAppendsOthers", func(t *testing.T) {
		got := plans.ApplyOverrides("pro", base, []plans.LimitInput{
			{Name: "search", Route: "GET /api/search", Algorithm: "token_bucket", Limit: 50, WindowSeconds: 60, Burst: 60},
			{Name: "items", Route: "GET /api/items/{id}", Algorithm: "fixed_window", Limit: 5, WindowSeconds: 1},
		})
		want := []enforce.Limit{
			{Name: "pro-global", Algorithm: enforce.FixedWindow, Limit: 100, Window: time.Hour, Cost: 1, Mode: enforce.ModeReject},
			{Name: "pro-search", Route: "GET /api/search", Algorithm: enforce.TokenBucket, Limit: 50, Window: time.Minute, Burst: 60, Cost: 1, Mode: enforce.ModeReject, PerKey: true},
			{Name: "pro-items", Route: "GET /api/items/{id}", Algorithm: enforce.FixedWindow, Limit: 5, Window: time.Second, Cost: 1, Mode: enforce.ModeReject, PerKey: true},
		}
		if len(got) != len(want) {
			t.Fatalf("got %+v", got)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("limit %d = %+v, want %+v", i, got[i], want[i])
			}
		}
		if base[1].Limit != 10 {
			t.Fatal("ApplyOverrides modified the base")
		}
	})
}

// KeyLimits is the snapshot's rule read from Postgres: the named plan's
// limits with the overrides applied; no plan (or one deleted meanwhile)
// leaves the overrides alone, as the snapshot enforces them.
func TestKeyLimits(t *testing.T) {
	s, _ := newService(t)
	ctx := context.Background()
	p := mustCreate(t, s, validPlan())
	override := plans.LimitInput{Name: "extra", Route: "GET /api/search", Algorithm: "fixed_window", Limit: 5, WindowSeconds: 1}
	tests := []struct {
		name      string
		slug      string
		overrides []plans.LimitInput
		want      []enforce.Limit
	}{
		{"PlanLimits", p.Slug, nil, p.EnforceLimits()},
		{"PlanLimitsWithOverride", p.Slug, []plans.LimitInput{override},
			append(slices.Clone(p.EnforceLimits()), override.Enforce(p.Slug))},
		{"NoPlanKeepsOverrides", "", []plans.LimitInput{override}, []enforce.Limit{override.Enforce("")}},
		{"DeletedPlanKeepsOverrides", "gone", []plans.LimitInput{override}, []enforce.Limit{override.Enforce("gone")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.KeyLimits(ctx, tt.slug, tt.overrides)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("KeyLimits(%q) = %+v, want %+v", tt.slug, got, tt.want)
			}
		})
	}
}
