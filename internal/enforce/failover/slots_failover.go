package failover

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
)

// AcquireSlots takes the slots from the primary while its breaker is
// closed, else (or when the primary fails) from the local store, each
// limit divided by the instance count as the rate layers are. The slot
// calls do not feed the breaker: the rate decisions of the same requests
// do, far more often.
func (s *Store) AcquireSlots(ctx context.Context, req enforce.Request, lease time.Duration) (*enforce.Lease, enforce.Decision, error) {
	primary, ok := s.primary.(enforce.SlotStore)
	if !ok {
		return nil, enforce.Decision{}, fmt.Errorf("%w: the primary store holds no concurrency slots", enforce.ErrInvalidRequest)
	}
	var err error
	if breakerState(s.state.Load()) == breakerClosed {
		var l *enforce.Lease
		var d enforce.Decision
		l, d, err = primary.AcquireSlots(ctx, req, lease)
		if err == nil || ctx.Err() != nil || !errors.Is(err, enforce.ErrStoreUnavailable) {
			return l, d, err
		}
	} else {
		err = enforce.ErrCircuitOpen
	}
	local, ok := s.local.(enforce.SlotStore)
	if !ok {
		if errors.Is(err, enforce.ErrStoreUnavailable) {
			return nil, enforce.Decision{}, err
		}
		return nil, enforce.Decision{}, fmt.Errorf("%w: %w", enforce.ErrStoreUnavailable, err)
	}
	l, d, err := local.AcquireSlots(ctx, s.localRequest(req), lease)
	d.Local = err == nil
	return l, d, err
}

// ReleaseToken releases a lease on the store that granted it: the local
// store's tokens there, the others on the primary.
func (s *Store) ReleaseToken(ctx context.Context, token string) error {
	kind, _, _, err := enforce.ParseLeaseToken(token)
	if err != nil {
		return err
	}
	if local, ok := s.local.(enforce.SlotStore); ok && kind == enforce.LeaseMemory {
		return local.ReleaseToken(ctx, token)
	}
	primary, ok := s.primary.(enforce.SlotStore)
	if !ok {
		return fmt.Errorf("%w: the primary store holds no concurrency slots", enforce.ErrInvalidRequest)
	}
	return primary.ReleaseToken(ctx, token)
}
