package redisstore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/sluicehq/sluice/internal/enforce"
)

// GrantQuota is memstore.Store.GrantQuota on Redis, atomic with decisions.
func (s *Store) GrantQuota(ctx context.Context, req enforce.Request, units int64) (enforce.LayerResult, error) {
	if units < 1 {
		return enforce.LayerResult{}, fmt.Errorf("%w: a grant of %d units", enforce.ErrInvalidRequest, units)
	}
	return s.adjust(ctx, req, strconv.FormatInt(units, 10))
}

// ResetQuota is memstore.Store.ResetQuota on Redis, atomic with decisions.
func (s *Store) ResetQuota(ctx context.Context, req enforce.Request) (enforce.LayerResult, error) {
	return s.adjust(ctx, req, "reset")
}

func (s *Store) adjust(ctx context.Context, req enforce.Request, op string) (enforce.LayerResult, error) {
	p, err := enforce.QuotaOf(req)
	if err != nil {
		return enforce.LayerResult{}, err
	}
	la, err := s.limitArgs(&req.Limits[0])
	if err != nil {
		return enforce.LayerResult{}, err
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
			return enforce.LayerResult{}, classify(err)
		}
		now = t.UnixMicro()
	}
	start, end := enforce.PeriodBounds(p.Period, now, enforce.AnchorMicros(req.Anchor))
	key := s.prefix + "{" + req.Subject + "}"
	if err := adjustScript.Run(ctx, s.client, []string{key}, la.field, start, op, la.args[6], end+p.Window, now).Err(); err != nil {
		return enforce.LayerResult{}, fmt.Errorf("adjust quota: %w", classify(err))
	}
	d, err := s.Peek(ctx, req)
	if err != nil {
		return enforce.LayerResult{}, err
	}
	return d.Layers[0], nil
}
