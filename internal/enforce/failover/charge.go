package failover

import (
	"context"
	"errors"

	"github.com/sluicehq/sluice/internal/enforce"
)

// Charge spends units past the limits in the store that decides now: the
// primary while it is in use, the local store while the breaker bypasses
// it, with each limit divided by the instance count as its decisions'
// are (enforce.Charger).
func (s *Store) Charge(ctx context.Context, req enforce.Request) error {
	store, req := s.settling(req)
	c, ok := store.(enforce.Charger)
	if !ok {
		return errors.ErrUnsupported
	}
	return c.Charge(ctx, req)
}
