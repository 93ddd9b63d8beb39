package plans_test

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/plans"
)

func insertDeveloper(t *testing.T, pool *pgxpool.Pool, email string) int64 {
	t.Helper()
	var id int64
	if err := pool.QueryRow(context.Background(),
		`INSERT INTO users (email, password_hash, role) VALUES ($1, 'x', 'developer') RETURNING id`, email).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// TestArchivePlan: an archived plan keeps its holders and its limits but is
// no upgrade choice; the default plan cannot be archived; restoring offers
// it again; both are audited.
func TestArchivePlan(t *testing.T) {
	s, pool := newService(t)
	ctx := context.Background()
	free := mustCreate(t, s, plans.PlanInput{Slug: "free", Name: "Free", IsDefault: true, IsPublic: true})
	pro := mustCreate(t, s, plans.PlanInput{Slug: "pro", Name: "Pro", IsPublic: true, Limits: []plans.LimitInput{
		{Name: "all", Algorithm: "fixed_window", Limit: 10, WindowSeconds: 60}}})

	t.Run("ErrDefaultPlan", func(t *testing.T) {
		_, err := s.SetArchived(ctx, actor, free.ID, free.Version, true)
		var ve *plans.ValidationError
		if !errors.As(err, &ve) || !ve.Has("archived") {
			t.Fatalf("archive the default plan = %v, want a field error on archived", err)
		}
	})
	archived, err := s.SetArchived(ctx, actor, pro.ID, pro.Version, true)
	if err != nil || archived.ArchivedAt == nil || archived.Offered() || archived.Version != pro.Version+1 || len(archived.Limits) != 1 {
		t.Fatalf("archive = %+v, %v", archived, err)
	}
	if e := lastAudit(t, pool); e.Action != "plan.archive" {
		t.Errorf("audit action %q", e.Action)
	}
	if got := plans.UpgradeChoices([]plans.Plan{free, archived}, free.ID); len(got) != 0 {
		t.Errorf("an archived plan is offered: %+v", got)
	}
	t.Run("ErrStaleVersion", func(t *testing.T) {
		if _, err := s.SetArchived(ctx, actor, pro.ID, pro.Version, false); !errors.Is(err, plans.ErrConflict) {
			t.Fatalf("restore at a stale version = %v", err)
		}
	})
	t.Run("ErrArchivedDefault", func(t *testing.T) {
		in := archived.Input()
		in.IsDefault = true
		_, err := s.Update(ctx, actor, archived.ID, archived.Version, in)
		var ve *plans.ValidationError
		if !errors.As(err, &ve) || !ve.Has("is_default") {
			t.Fatalf("make an archived plan default = %v", err)
		}
	})
	restored, err := s.SetArchived(ctx, actor, pro.ID, archived.Version, false)
	if err != nil || restored.ArchivedAt != nil || !restored.Offered() {
		t.Fatalf("restore = %+v, %v", restored, err)
	}
	if e := lastAudit(t, pool); e.Action != "plan.restore" {
		t.Errorf("audit action %q", e.Action)
	}
}

// TestUpgradeRequests: a developer asks for a public plan, one request at a
// time; approval moves them to it, refusal does not; each is audited.
func TestUpgradeRequests(t *testing.T) {
	s, pool := newService(t)
	ctx := context.Background()
	free := mustCreate(t, s, plans.PlanInput{Slug: "free", Name: "Free", IsDefault: true, IsPublic: true})
	pro := mustCreate(t, s, plans.PlanInput{Slug: "pro", Name: "Pro", IsPublic: true})
	secret := mustCreate(t, s, plans.PlanInput{Slug: "secret", Name: "Secret", IsPublic: false})
	dev := insertDeveloper(t, pool, "dev@example.com")

	for _, tc := range []struct {
		name   string
		planID int64
	}{{"ErrOwnPlan", free.ID}, {"ErrPrivatePlan", secret.ID}, {"ErrUnknownPlan", 999999}} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.RequestUpgrade(ctx, dev, tc.planID)
			var ve *plans.ValidationError
			if !errors.As(err, &ve) || !ve.Has("plan_id") {
				t.Fatalf("RequestUpgrade = %v, want a field error on plan_id", err)
			}
		})
	}
	req, err := s.RequestUpgrade(ctx, dev, pro.ID)
	if err != nil || req.Status != plans.UpgradePending || req.PlanName != "Pro" || req.FromPlan != "Free" || req.Email != "dev@example.com" {
		t.Fatalf("RequestUpgrade = %+v, %v", req, err)
	}
	if e := lastAudit(t, pool); e.Action != "upgrade.request" || e.Actor != "user:"+itoa(dev) {
		t.Errorf("audit = %+v", e)
	}
	if _, err := s.RequestUpgrade(ctx, dev, pro.ID); !errors.Is(err, plans.ErrUpgradePending) {
		t.Fatalf("second pending request = %v, want ErrUpgradePending", err)
	}

	refused, err := s.DecideUpgrade(ctx, actor, req.ID, false, "  not this month ")
	if err != nil || refused.Status != plans.UpgradeRefused || refused.Note != "not this month" || refused.DecidedAt == nil {
		t.Fatalf("refuse = %+v, %v", refused, err)
	}
	if n := countRows(t, pool, `SELECT count(*) FROM users WHERE id = $1 AND plan_id IS NULL`, dev); n != 1 {
		t.Error("a refusal moved the developer")
	}
	if e := lastAudit(t, pool); e.Action != "upgrade.refuse" {
		t.Errorf("audit = %+v", e)
	}
	t.Run("ErrAlreadyDecided", func(t *testing.T) {
		_, err := s.DecideUpgrade(ctx, actor, req.ID, true, "")
		var ve *plans.ValidationError
		if !errors.As(err, &ve) || !ve.Has("status") {
			t.Fatalf("decide twice = %v", err)
		}
	})

	again, err := s.RequestUpgrade(ctx, dev, pro.ID)
	if err != nil {
		t.Fatal(err)
	}
	approved, err := s.DecideUpgrade(ctx, actor, again.ID, true, "")
	if err != nil || approved.Status != plans.UpgradeApproved {
		t.Fatalf("approve = %+v, %v", approved, err)
	}
	if n := countRows(t, pool, `SELECT count(*) FROM users WHERE id = $1 AND plan_id = $2`, dev, pro.ID); n != 1 {
		t.Error("approval did not move the developer to Pro")
	}
	if e := lastAudit(t, pool); e.Action != "upgrade.approve" {
		t.Errorf("audit = %+v", e)
	}
	mine, err := s.UpgradeRequestsOf(ctx, dev, 10)
	if err != nil || len(mine) != 2 || mine[0].Status != plans.UpgradeApproved || mine[1].Status != plans.UpgradeRefused {
		t.Errorf("UpgradeRequestsOf = %+v, %v", mine, err)
	}
	if pending, err := s.UpgradeRequests(ctx, plans.UpgradePending, 10); err != nil || len(pending) != 0 {
		t.Errorf("pending = %+v, %v", pending, err)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
