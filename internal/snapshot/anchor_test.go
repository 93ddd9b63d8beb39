package snapshot_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/snapshot"
)

func TestCallersAreAnchoredAtTheirBillingAnchor(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	signup := time.Date(2026, 1, 31, 10, 0, 0, 0, time.UTC)
	set := time.Date(2026, 3, 15, 0, 0, 0, 0, time.UTC)
	own := f.user(t, "anchored@example.com", nil)
	if _, err := f.pool.Exec(ctx, `UPDATE users SET created_at = $2 WHERE id = $1`, f.dev, signup); err != nil {
		t.Fatal(err)
	}
	if _, err := f.pool.Exec(ctx, `UPDATE users SET billing_anchor = $2 WHERE id = $1`, own, set); err != nil {
		t.Fatal(err)
	}
	_, devSecret := f.key(t, apikeys.NewKey{})
	_, ownSecret := f.key(t, apikeys.NewKey{UserID: own})
	h := f.holder(t, snapshot.Options{})
	for _, tc := range []struct {
		name, secret string
		want         time.Time
	}{{"SignUpByDefault", devSecret, signup}, {"OperatorsAnchor", ownSecret, set}} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := h.ResolveKey(tc.secret)
			if err != nil {
				t.Fatal(err)
			}
			if !c.Anchor.Equal(tc.want) {
				t.Errorf("Anchor = %s, want %s", c.Anchor, tc.want)
			}
		})
	}
}
