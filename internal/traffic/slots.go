package traffic

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
)

// AcquireSlots takes concurrency slots from the wrapped store
// (enforce.SlotStore), so that a recorded portal keeps its concurrency
// tiers. The arrival is recorded by the rate decision that follows.
func (s *Store) AcquireSlots(ctx context.Context, req enforce.Request, lease time.Duration) (*enforce.Lease, enforce.Decision, error) {
	ss, ok := s.Store.(enforce.SlotStore)
	if !ok {
		return nil, enforce.Decision{}, fmt.Errorf("%w: the recorded store holds no concurrency slots", enforce.ErrInvalidRequest)
	}
	return ss.AcquireSlots(ctx, req, lease)
}

// ReleaseToken releases slots by token on the wrapped store.
func (s *Store) ReleaseToken(ctx context.Context, token string) error {
	ss, ok := s.Store.(enforce.SlotStore)
	if !ok {
		return fmt.Errorf("%w: the recorded store holds no concurrency slots", enforce.ErrInvalidRequest)
	}
	return ss.ReleaseToken(ctx, token)
}
