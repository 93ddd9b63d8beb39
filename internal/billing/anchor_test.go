package billing_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/audit"
	"github.com/sluicehq/sluice/internal/billing"
	"github.com/sluicehq/sluice/internal/testenv"
)

func TestSetAnchor(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	signup := time.Date(2026, 1, 31, 10, 0, 0, 0, time.UTC)
	var dev, op int64
	if err := pool.QueryRow(ctx, `INSERT INTO users (email, password_hash, role, created_at) VALUES ('d@example.com', 'x', 'developer', $1) RETURNING id`, signup).Scan(&dev); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `INSERT INTO users (email, password_hash, role) VALUES ('o@example.com', 'x', 'operator') RETURNING id`).Scan(&op); err != nil {
		t.Fatal(err)
	}

	got, err := billing.Get(ctx, pool, dev)
	if err != nil || got.Set != nil || !got.Effective.Equal(signup) {
		t.Fatalf("Get = %+v, %v; want no anchor set, effective at sign-up %s", got, err, signup)
	}
	at := time.Date(2026, 3, 15, 0, 0, 0, 0, time.FixedZone("CET", 3600))
	got, err = billing.SetAnchor(ctx, pool, "user:9", dev, &at)
	if err != nil || got.Set == nil || !got.Set.Equal(at) || !got.Effective.Equal(at) || got.Effective.Location() != time.UTC {
		t.Fatalf("SetAnchor = %+v, %v; want %s in UTC", got, err, at)
	}
	es, err := audit.List(ctx, pool, audit.Filter{Limit: 1})
	if err != nil || len(es) != 1 || es[0].Action != "user.set_billing_anchor" || es[0].Actor != "user:9" ||
		!strings.Contains(string(es[0].After), "2026-03-14T23:00:00Z") {
		t.Errorf("audit = %+v, %v", es, err)
	}
	got, err = billing.SetAnchor(ctx, pool, "user:9", dev, nil)
	if err != nil || got.Set != nil || !got.Effective.Equal(signup) {
		t.Errorf("cleared = %+v, %v; want back to sign-up", got, err)
	}
	t.Run("OperatorIsNotFound", func(t *testing.T) {
		if _, err := billing.SetAnchor(ctx, pool, "user:9", op, &at); !errors.Is(err, billing.ErrNotFound) {
			t.Errorf("SetAnchor(operator) = %v, want ErrNotFound", err)
		}
	})
	t.Run("MissingIsNotFound", func(t *testing.T) {
		if _, err := billing.Get(ctx, pool, 999999); !errors.Is(err, billing.ErrNotFound) {
			t.Errorf("Get(missing) = %v, want ErrNotFound", err)
		}
	})
}
