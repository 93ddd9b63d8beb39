package quotas_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/ledger"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/quotas"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/users"
)

// TestAdjustThroughTheLedger: a grant and a reset go through the quota
// ledger (its row keeps them for a counter rebuilt after a loss), are
// audited, and Granted reads what this period holds.
func TestAdjustThroughTheLedger(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Postgres(t)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	ps := plans.NewService(pool, nil, logger)
	repo := users.NewRepo(pool)
	p, err := ps.Create(ctx, "test", plans.PlanInput{Slug: "metered", Name: "Metered", IsPublic: true, IsDefault: true,
		Limits: []plans.LimitInput{{Name: "monthly", Algorithm: "quota", Period: "month", Limit: 5}}})
	if err != nil {
		t.Fatal(err)
	}
	dev, err := repo.Create(ctx, users.NewUser{Email: "d@example.com", Password: "correct horse battery", Role: users.RoleDeveloper})
	if err != nil {
		t.Fatal(err)
	}
	op, err := repo.Create(ctx, users.NewUser{Email: "o@example.com", Password: "correct horse battery", Role: users.RoleOperator})
	if err != nil {
		t.Fatal(err)
	}
	mem := memstore.New(memstore.Options{})
	svc := quotas.Service{Pool: pool, Users: repo, Plans: ps, Store: ledger.New(mem, pool, ledger.Options{Shared: mem, Logger: logger})}
	ledgerUsed := func() int64 {
		var n int64
		if err := pool.QueryRow(ctx, `SELECT COALESCE(sum(used), 0)::bigint FROM quota_ledger WHERE subject = $1`, enforce.DeveloperSubject(dev.ID)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	audited := func(action string) int {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE action = $1 AND actor = 'user:9'`, action).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	since := time.Now().AddDate(0, -2, 0)

	got, err := svc.Adjust(ctx, "user:9", dev.ID, quotas.Change{Limit: "monthly", Grant: true, Units: 7})
	if err != nil || got.After.Remaining != 12 || got.Plan.ID != p.ID || got.Limit.Name != "monthly" {
		t.Fatalf("grant = %+v, %v; want 12 remaining on metered/monthly", got, err)
	}
	if n := ledgerUsed(); n != -7 {
		t.Errorf("ledger used after the grant = %d, want -7", n)
	}
	if n, err := quotas.Granted(ctx, pool, dev.ID, "metered", "monthly", since); err != nil || n != 7 {
		t.Errorf("Granted = %d, %v; want 7", n, err)
	}
	if _, err := svc.Adjust(ctx, "user:9", dev.ID, quotas.Change{Limit: "monthly"}); err != nil {
		t.Fatalf("reset: %v", err)
	}
	if n := ledgerUsed(); n != 0 {
		t.Errorf("ledger used after the reset = %d, want 0", n)
	}
	if n, err := quotas.Granted(ctx, pool, dev.ID, "metered", "monthly", since); err != nil || n != 0 {
		t.Errorf("Granted after the reset = %d, %v; want 0", n, err)
	}
	if a, b := audited("quota.grant"), audited("quota.reset"); a != 1 || b != 1 {
		t.Errorf("audit entries: %d grants, %d resets; want 1 and 1", a, b)
	}

	for _, tc := range []struct {
		name  string
		user  int64
		c     quotas.Change
		field string
	}{
		{"ErrUnitsZero", dev.ID, quotas.Change{Limit: "monthly", Grant: true}, "units"},
		{"ErrUnitsOverMax", dev.ID, quotas.Change{Limit: "monthly", Grant: true, Units: quotas.MaxGrant + 1}, "units"},
		{"ErrLimitRequired", dev.ID, quotas.Change{}, "limit"},
		{"ErrNotAQuota", dev.ID, quotas.Change{Limit: "nope"}, "limit"},
		{"ErrOperatorIsNoDeveloper", op.ID, quotas.Change{Limit: "monthly"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := svc.Adjust(ctx, "user:9", tc.user, tc.c)
			var ve *plans.ValidationError
			switch {
			case tc.field == "" && !errors.Is(err, users.ErrNotFound):
				t.Errorf("err = %v, want users.ErrNotFound", err)
			case tc.field != "" && (!errors.As(err, &ve) || len(ve.Fields) != 1 || ve.Fields[0].Field != tc.field):
				t.Errorf("err = %v, want one field error on %s", err, tc.field)
			}
		})
	}
	if a := audited("quota.grant") + audited("quota.reset"); a != 2 {
		t.Errorf("audit entries after refused changes = %d, want still 2", a)
	}
	if _, err := (quotas.Service{Pool: pool, Users: repo, Plans: ps}).Adjust(ctx, "user:9", dev.ID, quotas.Change{Limit: "monthly"}); !errors.Is(err, quotas.ErrUnavailable) {
		t.Errorf("without a store: %v, want ErrUnavailable", err)
	}
}
