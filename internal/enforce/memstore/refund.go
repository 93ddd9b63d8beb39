package memstore

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
)

// Refund gives back each of req's limits' Cost units consumed by a decision
// made at `at`, by enforce.RefundState's rule (see enforce.Refunder). A
// subject or limit the store no longer holds has nothing to give back.
func (s *Store) Refund(ctx context.Context, req enforce.Request, at time.Time) error {
	if err := enforce.ValidateRequest(req); err != nil {
		return err
	}
	ps := make([]enforce.Params, len(req.Limits))
	var log error
	for i := range req.Limits {
		p, err := enforce.ParamsOf(&req.Limits[i])
		if err != nil {
			return err
		}
		if p.Kind == enforce.KindSlidingLog {
			log = fmt.Errorf("limit %q: %w", req.Limits[i].Name, enforce.ErrNotRefundable)
		}
		ps[i] = p
	}
	now := s.clock()
	sh, h := s.locate(req.Subject)
	sub := sh.get(h, req.Subject)
	if sub == nil {
		return log
	}
	atUS, anchor := at.UnixMicro(), enforce.AnchorMicros(req.Anchor)
	sub.mu.Lock()
	defer sub.mu.Unlock()
	for i := range ps {
		p := &ps[i]
		if p.Kind == enforce.KindSlidingLog {
			continue
		}
		st := sub.find(nil, req.Limits[i].Name, p, scopeOf(&req, i))
		if st == nil || st.key.Figures != enforce.FiguresOf(p) {
			continue // of other figures: the edit rescaled it; nothing of ours is left as such
		}
		if next, ok := enforce.RefundState(st.counter, p, p.Cost, enforce.RefundID(p, atUS, anchor), now); ok {
			st.counter = next
		}
	}
	return log
}
