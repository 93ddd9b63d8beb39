package failover

import (
	"context"
	"errors"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
)

// Refund gives units back to the store that consumed them: the primary
// while it is in use, the local store while the breaker bypasses it (each
// limit divided by the instance count, as its decisions' are). A
// refund the primary cannot take (it fails) is not moved to the local
// store, whose counts are another's: the caller keeps it to retry.
func (s *Store) Refund(ctx context.Context, req enforce.Request, at time.Time) error {
	store, req := s.settling(req)
	r, ok := store.(enforce.Refunder)
	if !ok {
		return errors.ErrUnsupported
	}
	return r.Refund(ctx, req, at)
}
