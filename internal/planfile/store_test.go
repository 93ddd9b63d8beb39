package planfile_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/audit"
	"github.com/sluicehq/sluice/internal/bootstrap"
	"github.com/sluicehq/sluice/internal/planfile"
	"github.com/sluicehq/sluice/internal/services"
	"github.com/sluicehq/sluice/internal/testenv"
)

// portalRoutes stands for the routes the portal serves itself.
var portalRoutes = []string{"GET /api/rate-limit-status"}

// seeded returns a store over a database holding the demo plans and
// service plus a second service, and the export of that state.
func seeded(t *testing.T) (*planfile.Store, *pgxpool.Pool) {
	t.Helper()
	pool := testenv.Postgres(t)
	ctx := context.Background()
	if _, err := bootstrap.Run(ctx, pool, bootstrap.Options{AdminEmail: "ops@example.com", AdminPassword: "correct horse battery", Demo: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := services.NewRepo(pool).Create(ctx, "test", services.Input{Slug: "billing", Name: "Billing API",
		Hosts: []string{"billing.example.com"}, Routes: []string{"GET /invoices/{id}", "POST /invoices"}}); err != nil {
		t.Fatal(err)
	}
	return planfile.NewStore(pool, portalRoutes), pool
}

func export(t *testing.T, s *planfile.Store, format planfile.Format) []byte {
	t.Helper()
	f, err := s.Export(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	b, err := planfile.Encode(f, format)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func decode(t *testing.T, name string, b []byte) *planfile.Parsed {
	t.Helper()
	p, err := planfile.Decode(name, b)
	if err != nil {
		t.Fatalf("decode %s: %v\n%s", name, err, b)
	}
	return p
}

func auditCount(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM audit_log`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestRoundTrip(t *testing.T) {
	for _, format := range []planfile.Format{planfile.YAML, planfile.JSON} {
		t.Run(string(format), func(t *testing.T) {
			s, pool := seeded(t)
			ctx := context.Background()
			first := export(t, s, format)
			if !bytes.Contains(first, []byte("billing.example.com")) || !bytes.Contains(first, []byte("sliding_window_counter")) {
				t.Fatalf("export lacks the seeded service or tiers:\n%s", first)
			}
			p := decode(t, "plans."+string(format), first)
			d, err := s.Diff(ctx, p, true)
			if err != nil {
				t.Fatal(err)
			}
			if !d.Empty() {
				t.Fatalf("diff of the export against itself, with prune: %s", d)
			}
			audits := auditCount(t, pool)
			if _, err := s.Apply(ctx, p, planfile.Options{Prune: true}); err != nil {
				t.Fatal(err)
			}
			if n := auditCount(t, pool); n != audits {
				t.Errorf("an empty apply wrote %d audit entries", n-audits)
			}
			if second := export(t, s, format); !bytes.Equal(first, second) {
				t.Fatalf("export, apply, export differ:\n%s\n---\n%s", first, second)
			}
		})
	}
}

func TestApplyChangesAndAuditsOnce(t *testing.T) {
	s, pool := seeded(t)
	ctx := context.Background()
	text := string(export(t, s, planfile.YAML))
	// Raise one tier, add a plan on the billing service's route.
	edited := strings.Replace(text, "limit: 10\n", "limit: 12\n", 1) + `  - slug: partner
    name: Partner
    limits:
      - name: invoices
        route: GET /invoices/{id}
        algorithm: token_bucket
        limit: 100
        window_seconds: 60
        burst: 20
`
	p := decode(t, "edited.yaml", []byte(edited))
	d, err := s.Diff(ctx, p, false)
	if err != nil {
		t.Fatal(err)
	}
	got := d.String()
	for _, want := range []string{"+ plan partner", "~ limits[search].limit: 10 -> 12"} {
		if !strings.Contains(got, want) {
			t.Errorf("diff lacks %q:\n%s", want, got)
		}
	}
	if len(d.Changes) != 2 {
		t.Errorf("diff has %d changes, want 2:\n%s", len(d.Changes), got)
	}
	audits := auditCount(t, pool)
	applied, err := s.Apply(ctx, p, planfile.Options{Base: d.Base, Actor: "user:1"})
	if err != nil {
		t.Fatal(err)
	}
	if applied.String() != got {
		t.Errorf("applied diff differs from the reviewed one:\n%s\n---\n%s", applied, got)
	}
	entries, err := audit.List(ctx, pool, audit.Filter{ObjectID: "file"})
	if err != nil {
		t.Fatal(err)
	}
	if n := auditCount(t, pool); n != audits+1 || len(entries) != 1 || entries[0].Action != "plans.apply" || entries[0].Actor != "user:1" {
		t.Fatalf("want one plans.apply audit entry by user:1, got %d new entries: %+v", n-audits, entries)
	}
	if !bytes.Contains(entries[0].After, []byte(`"partner"`)) || !bytes.Contains(entries[0].After, []byte(`limits[search].limit`)) {
		t.Errorf("audit entry lacks the diff: %s", entries[0].After)
	}
	again, err := s.Diff(ctx, decode(t, "edited.yaml", []byte(edited)), false)
	if err != nil || !again.Empty() {
		t.Fatalf("diff after apply: %v %s", err, again)
	}
	// The reviewed base is stale now: an apply naming it is refused.
	if _, err := s.Apply(ctx, p, planfile.Options{Base: d.Base}); !errors.Is(err, planfile.ErrConflict) {
		t.Fatalf("apply on a stale base: %v, want ErrConflict", err)
	}
}

func TestDryRunWritesNothing(t *testing.T) {
	s, pool := seeded(t)
	ctx := context.Background()
	before := export(t, s, planfile.JSON)
	edited := strings.Replace(string(export(t, s, planfile.YAML)), "limit: 10\n", "limit: 99\n", 1)
	audits := auditCount(t, pool)
	d, err := s.Apply(ctx, decode(t, "x.yaml", []byte(edited)), planfile.Options{DryRun: true, Prune: true})
	if err != nil {
		t.Fatal(err)
	}
	if d.Empty() {
		t.Fatal("dry run found no change")
	}
	if after := export(t, s, planfile.JSON); !bytes.Equal(before, after) {
		t.Errorf("dry run changed the state")
	}
	if n := auditCount(t, pool); n != audits {
		t.Errorf("dry run wrote %d audit entries", n-audits)
	}
}

func TestPruneRemovesExactlyWhatTheFileOmits(t *testing.T) {
	s, _ := seeded(t)
	ctx := context.Background()
	full, err := s.Export(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Drop the billing service and one plan that no key or developer uses.
	var keep planfile.File
	keep.Version = 1
	var dropped string
	for _, svc := range full.Services {
		if svc.Slug != "billing" {
			keep.Services = append(keep.Services, svc)
		}
	}
	for _, pl := range full.Plans {
		if dropped == "" && !pl.IsDefault && !pl.IsAnonymous {
			dropped = pl.Slug
			continue
		}
		keep.Plans = append(keep.Plans, pl)
	}
	if dropped == "" {
		t.Fatal("the demo seed has no plan to drop")
	}
	b, err := planfile.Encode(keep, planfile.YAML)
	if err != nil {
		t.Fatal(err)
	}
	p := decode(t, "keep.yaml", b)

	t.Run("WithoutPruneNothingChanges", func(t *testing.T) {
		d, err := s.Diff(ctx, p, false)
		if err != nil || !d.Empty() {
			t.Fatalf("diff without prune: %v\n%s", err, d)
		}
	})
	t.Run("PruneDeletesTheOmitted", func(t *testing.T) {
		d, err := s.Apply(ctx, p, planfile.Options{Prune: true})
		if err != nil {
			t.Fatal(err)
		}
		want := "- service billing\n- plan " + dropped + "\n"
		if d.String() != want {
			t.Fatalf("prune diff:\n%s\nwant:\n%s", d, want)
		}
		after, err := s.Export(ctx)
		if err != nil {
			t.Fatal(err)
		}
		wantBytes, _ := planfile.Encode(keep, planfile.JSON)
		gotBytes, _ := planfile.Encode(after, planfile.JSON)
		if !bytes.Equal(wantBytes, gotBytes) {
			t.Fatalf("state after prune is not the file:\n%s\n---\n%s", gotBytes, wantBytes)
		}
	})
}

func TestPruneRefusesAPlanInUse(t *testing.T) {
	s, pool := seeded(t)
	ctx := context.Background()
	full, err := s.Export(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var rest planfile.File
	rest.Version = 1
	rest.Services = full.Services
	var used string
	for _, pl := range full.Plans {
		if used == "" && !pl.IsDefault && !pl.IsAnonymous {
			used = pl.Slug
			continue
		}
		rest.Plans = append(rest.Plans, pl)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO users (email, password_hash, role, plan_id)
SELECT 'dev@example.com', 'x', 'developer', id FROM plans WHERE slug = $1`, used); err != nil {
		t.Fatal(err)
	}
	b, _ := planfile.Encode(rest, planfile.YAML)
	before := export(t, s, planfile.JSON)
	_, err = s.Apply(ctx, decode(t, "rest.yaml", b), planfile.Options{Prune: true})
	var fe *planfile.Error
	if !errors.As(err, &fe) || len(fe.Problems) != 1 || fe.Problems[0].Field != "plans" ||
		!strings.Contains(fe.Problems[0].Message, used) || !strings.Contains(fe.Problems[0].Message, "1 developers") {
		t.Fatalf("pruning a plan a developer uses: %v", err)
	}
	if after := export(t, s, planfile.JSON); !bytes.Equal(before, after) {
		t.Fatal("a refused apply changed the state")
	}
}

// TestRolesMoveWithinOneApply: the file makes another plan the default
// (and a new plan the anonymous one); the schema's one-default index holds
// at every statement, and the plan that had the role, left out of the
// file, gives it up in the same diff.
func TestRolesMoveWithinOneApply(t *testing.T) {
	s, _ := seeded(t)
	ctx := context.Background()
	full, err := s.Export(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var def, anon, other string
	for _, p := range full.Plans {
		switch {
		case p.IsDefault:
			def = p.Slug
		case p.IsAnonymous:
			anon = p.Slug
		default:
			other = p.Slug
		}
	}
	if def == "" || anon == "" || other == "" {
		t.Fatalf("the demo seed lacks a default, anonymous and other plan: %q %q %q", def, anon, other)
	}
	var f planfile.File
	f.Version = 1
	for _, p := range full.Plans {
		if p.Slug == other {
			p.IsDefault = true
			f.Plans = append(f.Plans, p)
		}
	}
	f.Plans = append(f.Plans, planfile.Plan{Slug: "guests", Name: "Guests", IsAnonymous: true})
	b, _ := planfile.Encode(f, planfile.YAML)
	d, err := s.Apply(ctx, decode(t, "roles.yaml", b), planfile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	text := d.String()
	for _, want := range []string{"~ plan " + def + "\n    ~ is_default: true -> false", "~ plan " + anon + "\n    ~ is_anonymous: true -> false",
		"~ plan " + other + "\n    ~ is_default: false -> true", "+ plan guests"} {
		if !strings.Contains(text, want) {
			t.Errorf("diff lacks %q:\n%s", want, text)
		}
	}
	after, _ := s.Export(ctx)
	for _, p := range after.Plans {
		if p.IsDefault != (p.Slug == other) || p.IsAnonymous != (p.Slug == "guests") {
			t.Errorf("plan %s: default %v anonymous %v", p.Slug, p.IsDefault, p.IsAnonymous)
		}
	}
}

// TestRouteMovesBetweenServices: one file moves a route from one service
// to a new one and points a new tier at it; routes are unique across
// services, so the old owner's routes must go first.
func TestRouteMovesBetweenServices(t *testing.T) {
	s, _ := seeded(t)
	ctx := context.Background()
	text := string(export(t, s, planfile.YAML))
	moved := strings.Replace(text, "      - POST /invoices\n", "", 1)
	if moved == text {
		t.Fatalf("export lacks the billing route:\n%s", text)
	}
	moved = strings.Replace(moved, "services:\n", `services:
  - slug: ar
    name: Receivables
    routes:
      - POST /invoices
`, 1) + `  - slug: ar-clients
    name: AR clients
    limits:
      - name: create
        route: POST /invoices
        algorithm: fixed_window
        limit: 5
        window_seconds: 60
`
	if _, err := s.Apply(ctx, decode(t, "moved.yaml", []byte(moved)), planfile.Options{}); err != nil {
		t.Fatal(err)
	}
	f, _ := s.Export(ctx)
	owners := map[string]string{}
	for _, svc := range f.Services {
		for _, r := range svc.Routes {
			owners[r] = svc.Slug
		}
	}
	if owners["POST /invoices"] != "ar" || owners["GET /invoices/{id}"] != "billing" {
		t.Fatalf("route owners after the move: %v", owners)
	}
	again, err := s.Diff(ctx, decode(t, "moved.yaml", []byte(moved)), false)
	if err != nil || !again.Empty() {
		t.Fatalf("diff after apply: %v %s", err, again)
	}
}

// TestConcurrentAppliesOfOneBase: two applies reviewed against the same
// state race; the lock makes them take turns, so exactly one is written
// and the other is refused as stale rather than overwriting it.
func TestConcurrentAppliesOfOneBase(t *testing.T) {
	s, _ := seeded(t)
	ctx := context.Background()
	text := string(export(t, s, planfile.YAML))
	base, err := s.Diff(ctx, decode(t, "x.yaml", []byte(text)), false)
	if err != nil {
		t.Fatal(err)
	}
	edits := []string{
		strings.Replace(text, "name: Billing API", "name: Billing one", 1),
		strings.Replace(text, "name: Billing API", "name: Billing two", 1),
	}
	errs := make(chan error, len(edits))
	for i, e := range edits {
		p := decode(t, fmt.Sprintf("edit%d.yaml", i), []byte(e))
		go func() {
			_, err := s.Apply(ctx, p, planfile.Options{Base: base.Base})
			errs <- err
		}()
	}
	var ok, stale int
	for range edits {
		switch err := <-errs; {
		case err == nil:
			ok++
		case errors.Is(err, planfile.ErrConflict):
			stale++
		default:
			t.Fatalf("apply: %v", err)
		}
	}
	if ok != 1 || stale != 1 {
		t.Fatalf("%d applied, %d refused as stale; want 1 and 1", ok, stale)
	}
}

// TestDryRunKeepsDeadKeys: the prune check detaches revoked keys from a
// plan it would delete; a dry run must roll that back too.
func TestDryRunKeepsDeadKeys(t *testing.T) {
	s, pool := seeded(t)
	ctx := context.Background()
	full, err := s.Export(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var rest planfile.File
	rest.Version = 1
	rest.Services = full.Services
	var pruned string
	for _, pl := range full.Plans {
		if pruned == "" && !pl.IsDefault && !pl.IsAnonymous {
			pruned = pl.Slug
			continue
		}
		rest.Plans = append(rest.Plans, pl)
	}
	var keyID int64
	if err := pool.QueryRow(ctx, `
WITH u AS (INSERT INTO users (email, password_hash, role) VALUES ('dev@example.com', 'x', 'developer') RETURNING id)
INSERT INTO api_keys (user_id, name, plan_id, revoked_at)
SELECT u.id, 'old', p.id, now() FROM u, plans p WHERE p.slug = $1 RETURNING id`, pruned).Scan(&keyID); err != nil {
		t.Fatal(err)
	}
	b, _ := planfile.Encode(rest, planfile.YAML)
	d, err := s.Apply(ctx, decode(t, "rest.yaml", b), planfile.Options{Prune: true, DryRun: true})
	if err != nil || !strings.Contains(d.String(), "- plan "+pruned) {
		t.Fatalf("dry run: %v %s", err, d)
	}
	var planID *int64
	if err := pool.QueryRow(ctx, `SELECT plan_id FROM api_keys WHERE id = $1`, keyID).Scan(&planID); err != nil {
		t.Fatal(err)
	}
	if planID == nil {
		t.Fatal("the dry run detached the revoked key from its plan")
	}
}
