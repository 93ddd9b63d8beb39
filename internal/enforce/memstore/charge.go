package memstore

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice/internal/enforce"
)

// Charge spends each of req's limits' Cost units whatever remains
// (enforce.Charger), as redisstore.Store.Charge does on Redis: a request
// whose response said it cost more than it was charged. A sliding log is
// refused before anything is charged.
func (s *Store) Charge(ctx context.Context, req enforce.Request) error {
	if err := enforce.ValidateRequest(req); err != nil {
		return err
	}
	ps := make([]enforce.Params, len(req.Limits))
	for i := range req.Limits {
		p, err := enforce.ParamsOf(&req.Limits[i])
		if err != nil {
			return err
		}
		if p.Kind == enforce.KindSlidingLog {
			return fmt.Errorf("%w: limit %q is a sliding log, which is not charged after a decision", enforce.ErrInvalidRequest, req.Limits[i].Name)
		}
		ps[i] = p
	}
	now := s.clock()
	anchor := enforce.AnchorMicros(req.Anchor)
	sh, h := s.locate(req.Subject)
	sub := sh.add(h, req.Subject, now, s.sweepEvery, s.shardMax, s.evictions)
	sub.mu.Lock()
	defer sub.mu.Unlock()
	for i := range ps {
		p := &ps[i]
		name, scope, fig := req.Limits[i].Name, scopeOf(&req, i), enforce.FiguresOf(p)
		st := sub.find(nil, name, p, scope)
		switch {
		case st == nil:
			sub.dropStale(now)
			st = sub.addLimit(limitState{key: &limitKey{name: name, Figures: fig}})
			if scope != "" {
				st.ext = &limitExt{scope: scope}
			}
		case st.key.Figures != fig:
			// Edited since: what was spent stays spent, at the new figures.
			st.counter = enforce.Rescale(st.counter, st.key.Figures, p, now)
			st.key = &limitKey{name: name, Figures: fig}
		}
		next, _ := enforce.ChargeState(st.counter, *p, now, anchor)
		st.counter = next
		// Forgetting the subject before the charge is paid off would hand
		// it a fresh budget early.
		sub.guard = max(sub.guard, next.ExpiresAt(p))
	}
	sub.last = max(sub.last, now)
	return nil
}
