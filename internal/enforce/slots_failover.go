package enforce

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// AcquireSlots takes the slots from the primary while its breaker is
// closed, else (or when the primary fails) from the local store, each
// limit divided by the instance count as the rate layers are. The slot
// calls do not feed the breaker: the rate decisions of the same requests
// do, far more often.
func (s *FailoverStore) AcquireSlots(ctx context.Context, req Request, lease time.Duration) (*Lease, Decision, error) {
	primary, ok := s.primary.(SlotStore)
	if !ok {
		return nil, Decision{}, fmt.Errorf("%w: the primary store holds no concurrency slots", ErrInvalidRequest)
	}
	var err error
	if breakerState(s.state.Load()) == breakerClosed {
		var l *Lease
		var d Decision
		l, d, err = primary.AcquireSlots(ctx, req, lease)
		if err == nil || ctx.Err() != nil || !errors.Is(err, ErrStoreUnavailable) {
			return l, d, err
		}
	} else {
		err = ErrCircuitOpen
	}
	local, ok := s.local.(SlotStore)
	if !ok {
		if errors.Is(err, ErrStoreUnavailable) {
			return nil, Decision{}, err
		}
		return nil, Decision{}, fmt.Errorf("%w: %w", ErrStoreUnavailable, err)
	}
	l, d, err := local.AcquireSlots(ctx, divideLimits(req, s.instances), lease)
	d.Local = err == nil
	return l, d, err
}

// ReleaseToken releases a lease on the store that granted it: the local
// store's tokens there, the others on the primary.
func (s *FailoverStore) ReleaseToken(ctx context.Context, token string) error {
	kind, _, _, err := parseLeaseToken(token)
	if err != nil {
		return err
	}
	if local, ok := s.local.(SlotStore); ok && kind == leaseMemory {
		return local.ReleaseToken(ctx, token)
	}
	primary, ok := s.primary.(SlotStore)
	if !ok {
		return fmt.Errorf("%w: the primary store holds no concurrency slots", ErrInvalidRequest)
	}
	return primary.ReleaseToken(ctx, token)
}
