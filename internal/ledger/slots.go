package ledger

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
)

// AcquireSlots takes concurrency slots from the wrapped store
// (enforce.SlotStore): the ledger keeps quotas, not slots.
func (l *Ledger) AcquireSlots(ctx context.Context, req enforce.Request, lease time.Duration) (*enforce.Lease, enforce.Decision, error) {
	ss, ok := l.inner.(enforce.SlotStore)
	if !ok {
		return nil, enforce.Decision{}, fmt.Errorf("%w: the wrapped store holds no concurrency slots", enforce.ErrInvalidRequest)
	}
	return ss.AcquireSlots(ctx, req, lease)
}

// ReleaseToken releases slots by token on the wrapped store.
func (l *Ledger) ReleaseToken(ctx context.Context, token string) error {
	ss, ok := l.inner.(enforce.SlotStore)
	if !ok {
		return fmt.Errorf("%w: the wrapped store holds no concurrency slots", enforce.ErrInvalidRequest)
	}
	return ss.ReleaseToken(ctx, token)
}
