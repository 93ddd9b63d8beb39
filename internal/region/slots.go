package region

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
)

// AcquireSlots takes concurrency slots in this region's store. Requests in
// flight are not consumption the regions could publish to each other, so
// in share and sync modes each region holds to its share of a cap
// (ShareLimit), exactly, on its own Redis: together never more than the
// cap. In shared mode the one store holds the whole cap.
func (s *Store) AcquireSlots(ctx context.Context, req enforce.Request, lease time.Duration) (*enforce.Lease, enforce.Decision, error) {
	ss, ok := s.next.(enforce.SlotStore)
	if !ok {
		return nil, enforce.Decision{}, enforce.ErrSlotsAllow
	}
	if s.cfg.Mode != Shared {
		scaled := req
		scaled.Limits = make([]enforce.Limit, len(req.Limits))
		for i, l := range req.Limits {
			scaled.Limits[i] = s.ShareLimit(l)
		}
		req = scaled
	}
	return ss.AcquireSlots(ctx, req, lease)
}

// ReleaseToken releases slots by token in this region's store.
func (s *Store) ReleaseToken(ctx context.Context, token string) error {
	ss, ok := s.next.(enforce.SlotStore)
	if !ok {
		return enforce.ErrSlotsAllow
	}
	return ss.ReleaseToken(ctx, token)
}

// Unwrap returns this region's own store.
func (s *Store) Unwrap() enforce.Store { return s.next }
