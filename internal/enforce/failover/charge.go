package failover

import (
	"context"
	"errors"

	"github.com/sluicehq/sluice/internal/enforce"
)

// Charge spends units past the limits in the store that decides now: the
// primary while it is in use, the local store while the breaker bypasses
// it (enforce.Charger).
func (s *Store) Charge(ctx context.Context, req enforce.Request) error {
	store := s.primary
	if s.BreakerState() == "open" {
		store = s.local
	}
	c, ok := store.(enforce.Charger)
	if !ok {
		return errors.ErrUnsupported
	}
	return c.Charge(ctx, req)
}
