package plans_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/plans"
)

func TestPromoteShadowTier(t *testing.T) {
	s, pool := newService(t)
	ctx := context.Background()
	p := mustCreate(t, s, validPlan())
	trial := plans.LimitInput{Name: "trial", Route: "GET /api/items/{id}", Algorithm: "fixed_window", Mode: "shadow", Limit: 5, WindowSeconds: 60, Cost: 1}
	p2, err := s.AddLimit(ctx, actor, p.ID, p.Version, trial)
	if err != nil {
		t.Fatalf("AddLimit(shadow): %v", err)
	}
	shadow := p2.Limits[len(p2.Limits)-1]
	if shadow.Mode != enforce.ModeShadow {
		t.Fatalf("added tier mode = %q, want shadow", shadow.Mode)
	}
	enforced := p2.Limits[0]

	t.Run("StaleVersionConflicts", func(t *testing.T) {
		if _, err := s.PromoteLimit(ctx, actor, p.ID, p.Version, shadow.ID); !errors.Is(err, plans.ErrConflict) {
			t.Fatalf("PromoteLimit(stale) = %v, want ErrConflict", err)
		}
	})
	t.Run("MissingLimitIsNotFound", func(t *testing.T) {
		if _, err := s.PromoteLimit(ctx, actor, p.ID, p2.Version, 99999); !errors.Is(err, plans.ErrNotFound) {
			t.Fatalf("PromoteLimit(missing) = %v, want ErrNotFound", err)
		}
	})
	t.Run("EnforcedTierIsRefusedNamingMode", func(t *testing.T) {
		_, err := s.PromoteLimit(ctx, actor, p.ID, p2.Version, enforced.ID)
		var ve *plans.ValidationError
		if !errors.As(err, &ve) || len(ve.Fields) != 1 || ve.Fields[0].Field != "mode" {
			t.Fatalf("PromoteLimit(enforced) = %v, want a validation error on mode", err)
		}
	})

	p3, err := s.PromoteLimit(ctx, actor, p.ID, p2.Version, shadow.ID)
	if err != nil {
		t.Fatalf("PromoteLimit: %v", err)
	}
	got := p3.Limits[len(p3.Limits)-1]
	want := shadow
	want.Mode = enforce.ModeReject
	if got != want || p3.Version != p2.Version+1 {
		t.Errorf("after promotion: %+v (version %d), want %+v (version %d)", got, p3.Version, want, p2.Version+1)
	}
	e := lastAudit(t, pool)
	if e.Action != "limit.promote" || e.ObjectType != "limit" || !strings.Contains(string(e.Before), `"shadow"`) || !strings.Contains(string(e.After), `"reject"`) {
		t.Errorf("audit = %+v %s -> %s, want limit.promote from shadow to reject", e, e.Before, e.After)
	}
}
