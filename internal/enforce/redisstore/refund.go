package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
)

// Refund is memstore.Store.Refund on Redis, in one script call atomic with
// decisions (scripts/refund.lua): each of req's limits gets its Cost units
// back by enforce.RefundState's rule for a decision made at `at`.
func (s *Store) Refund(ctx context.Context, req enforce.Request, at time.Time) error {
	if err := enforce.ValidateRequest(req); err != nil {
		return err
	}
	args := make([]any, 1, 1+5*len(req.Limits))
	args[0] = ""
	if s.testNow != nil {
		args[0] = s.clock().UnixMicro()
	}
	atUS, anchor := at.UnixMicro(), enforce.AnchorMicros(req.Anchor)
	var log error
	for i := range req.Limits {
		// The arguments are looked up with the cost cleared, so the cache
		// holds one entry per limit whatever the units given back.
		norm := req.Limits[i]
		norm.Cost = 0
		la, err := s.limitArgs(&norm)
		if err != nil {
			return err
		}
		p, _ := enforce.ParamsOf(&req.Limits[i])
		if p.Kind == enforce.KindSlidingLog {
			log = fmt.Errorf("limit %q: %w", norm.Name, enforce.ErrNotRefundable)
			continue
		}
		if req.Limits[i].PerKey && req.Key != "" {
			la = la.scoped(req.Key)
		}
		code := p.Code()
		// The interval in plain digits: miniredis's tonumber reads no
		// exponent in a number without a point ("6e+06").
		args = append(args, la.field+"@"+la.args[6].(string), code, p.Cost, enforce.RefundID(&p, atUS, anchor), strconv.FormatFloat(p.Interval, 'f', -1, 64))
	}
	if len(args) > 1 {
		ctx, cancel := context.WithTimeout(ctx, s.timeout)
		defer cancel()
		key := s.prefix + "{" + req.Subject + "}"
		if err := refundScript.Run(ctx, s.client, []string{key}, args...).Err(); err != nil {
			return fmt.Errorf("refund: %w", classify(err))
		}
	}
	return log
}
