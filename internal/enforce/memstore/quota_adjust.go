package memstore

import (
	"context"
	_ "embed"
	"fmt"
	"math"

	"github.com/sluicehq/sluice/internal/enforce"
)

// A quota's count can be changed outside a decision: an operator grants a
// one-off top-up of units, which last until the period renews, or resets
// the period's count to zero. Both stores implement it the same way, over
// the state their decisions keep.

// adjustReset asks adjust for a reset rather than a grant; any other value
// is taken off the count (a negative one adds to it, see AddQuota).
const adjustReset = math.MinInt64

// GrantQuota gives req's subject units extra of req's one quota limit for
// the current period (they go when it renews), and returns the layer as it
// then stands.
func (s *Store) GrantQuota(ctx context.Context, req enforce.Request, units int64) (enforce.LayerResult, error) {
	if units < 1 {
		return enforce.LayerResult{}, fmt.Errorf("%w: a grant of %d units", enforce.ErrInvalidRequest, units)
	}
	return s.adjust(ctx, req, units)
}

// ResetQuota sets the current period's count of req's one quota limit to
// zero, and returns the layer as it then stands.
func (s *Store) ResetQuota(ctx context.Context, req enforce.Request) (enforce.LayerResult, error) {
	return s.adjust(ctx, req, adjustReset)
}

func (s *Store) adjust(ctx context.Context, req enforce.Request, units int64) (enforce.LayerResult, error) {
	p, err := enforce.QuotaOf(req)
	if err != nil {
		return enforce.LayerResult{}, err
	}
	now := s.clock()
	start, _ := enforce.PeriodBounds(p.Period, now, enforce.AnchorMicros(req.Anchor))
	sh, h := s.locate(req.Subject)
	sub := sh.add(h, req.Subject, now, s.sweepEvery, s.shardMax, s.evictions)
	sub.mu.Lock()
	scope := scopeOf(&req, 0)
	st := sub.find(nil, req.Limits[0].Name, &p, scope)
	if st == nil {
		sub.dropStale(now)
		st = sub.addLimit(limitState{key: &limitKey{name: req.Limits[0].Name, Figures: enforce.FiguresOf(&p)}})
		if scope != "" {
			st.ext = &limitExt{scope: scope}
		}
	}
	count := int64(0)
	if st.key.Figures == enforce.FiguresOf(&p) && st.counter.Has && st.counter.Idx == start {
		count = st.counter.Count
	}
	if units == adjustReset {
		count = 0
	} else {
		count -= units
	}
	st.key = &limitKey{name: req.Limits[0].Name, Figures: enforce.FiguresOf(&p)}
	st.counter = enforce.CounterState{Idx: start, Count: count, Has: true}
	sub.last = max(sub.last, now)
	sub.mu.Unlock()
	d, err := s.Peek(ctx, req)
	if err != nil {
		return enforce.LayerResult{}, err
	}
	return d.Layers[0], nil
}
