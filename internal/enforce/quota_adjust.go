package enforce

import (
	"context"
	_ "embed"
	"fmt"
	"math"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// A quota's count can be changed outside a decision: an operator grants a
// one-off top-up of units, which last until the period renews, or resets
// the period's count to zero. Both stores implement it the same way, over
// the state their decisions keep.

// adjustReset asks adjust for a reset rather than a grant; any other value
// is taken off the count (a negative one adds to it, see AddQuota).
const adjustReset = math.MinInt64

//go:embed scripts/adjust.lua
var adjustScript string

// quotaOf checks that req names one quota and returns its params and the
// instant (µs) of now in the subject's period.
func quotaOf(req Request) (params, error) {
	if err := validateRequest(req); err != nil {
		return params{}, err
	}
	if len(req.Limits) != 1 || req.Limits[0].Algorithm != Quota {
		return params{}, fmt.Errorf("%w: adjusting a quota needs exactly one quota limit", ErrInvalidRequest)
	}
	return paramsOf(&req.Limits[0])
}

// GrantQuota gives req's subject units extra of req's one quota limit for
// the current period (they go when it renews), and returns the layer as it
// then stands.
func (s *MemoryStore) GrantQuota(ctx context.Context, req Request, units int64) (LayerResult, error) {
	if units < 1 {
		return LayerResult{}, fmt.Errorf("%w: a grant of %d units", ErrInvalidRequest, units)
	}
	return s.adjust(ctx, req, units)
}

// ResetQuota sets the current period's count of req's one quota limit to
// zero, and returns the layer as it then stands.
func (s *MemoryStore) ResetQuota(ctx context.Context, req Request) (LayerResult, error) {
	return s.adjust(ctx, req, adjustReset)
}

func (s *MemoryStore) adjust(ctx context.Context, req Request, units int64) (LayerResult, error) {
	p, err := quotaOf(req)
	if err != nil {
		return LayerResult{}, err
	}
	now := s.clock()
	start, _ := periodBounds(p.period, now, anchorMicros(req.Anchor))
	sh, h := s.locate(req.Subject)
	sub := sh.add(h, req.Subject, now, s.sweepEvery, s.shardMax, s.evictions)
	sub.mu.Lock()
	scope := scopeOf(&req, 0)
	st := sub.find(nil, req.Limits[0].Name, &p, scope)
	if st == nil {
		sub.dropStale(now)
		st = sub.addLimit(limitState{key: &limitKey{name: req.Limits[0].Name, figures: figuresOf(&p)}})
		if scope != "" {
			st.ext = &limitExt{scope: scope}
		}
	}
	count := int64(0)
	if st.key.figures == figuresOf(&p) && st.counter.has && st.counter.idx == start {
		count = st.counter.count
	}
	if units == adjustReset {
		count = 0
	} else {
		count -= units
	}
	st.key = &limitKey{name: req.Limits[0].Name, figures: figuresOf(&p)}
	st.counter = counterState{idx: start, count: count, has: true}
	sub.last = max(sub.last, now)
	sub.mu.Unlock()
	d, err := s.Peek(ctx, req)
	if err != nil {
		return LayerResult{}, err
	}
	return d.Layers[0], nil
}

// GrantQuota is MemoryStore.GrantQuota on Redis, atomic with decisions.
func (s *RedisStore) GrantQuota(ctx context.Context, req Request, units int64) (LayerResult, error) {
	if units < 1 {
		return LayerResult{}, fmt.Errorf("%w: a grant of %d units", ErrInvalidRequest, units)
	}
	return s.adjust(ctx, req, strconv.FormatInt(units, 10))
}

// ResetQuota is MemoryStore.ResetQuota on Redis, atomic with decisions.
func (s *RedisStore) ResetQuota(ctx context.Context, req Request) (LayerResult, error) {
	return s.adjust(ctx, req, "reset")
}

func (s *RedisStore) adjust(ctx context.Context, req Request, op string) (LayerResult, error) {
	p, err := quotaOf(req)
	if err != nil {
		return LayerResult{}, err
	}
	la, err := s.limitArgs(&req.Limits[0])
	if err != nil {
		return LayerResult{}, err
	}
	if req.Limits[0].PerKey && req.Key != "" {
		la = la.scoped(req.Key)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	// The period is the store's: Redis's clock, as decisions read it.
	now := s.clock().UnixMicro()
	if s.testNow == nil {
		t, err := s.client.Time(ctx).Result()
		if err != nil {
			return LayerResult{}, classify(err)
		}
		now = t.UnixMicro()
	}
	start, end := periodBounds(p.period, now, anchorMicros(req.Anchor))
	key := s.prefix + "{" + req.Subject + "}"
	script := redis.NewScript(adjustScript)
	if err := script.Run(ctx, s.client, []string{key}, la.field, start, op, la.args[6], end+p.window, now).Err(); err != nil {
		return LayerResult{}, fmt.Errorf("adjust quota: %w", classify(err))
	}
	d, err := s.Peek(ctx, req)
	if err != nil {
		return LayerResult{}, err
	}
	return d.Layers[0], nil
}
