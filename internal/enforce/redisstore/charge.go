package redisstore

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice/internal/enforce"
)

// Charge counts in req's limits consumption that was admitted elsewhere,
// another region's requests say, whatever remains here: each limit's Cost
// units are spent even past the limit, so a window's count may exceed it and
// a bucket may go into debt (later requests wait for the refill to pay it
// off). It runs in one script call like Allow, counts no usage and never
// feeds the negative cache. The limits' figures (name, algorithm, limit,
// window, burst) must be those the deciding store uses, since they name the
// state; only Cost differs.
func (s *Store) Charge(ctx context.Context, req enforce.Request) error {
	if err := enforce.ValidateRequest(req); err != nil {
		return err
	}
	call, err := s.prepareAtCost(req)
	if err != nil {
		return err
	}
	call.mode = "f"
	if err := s.do(ctx, call); err != nil {
		return err
	}
	n := len(call.reply)
	s.putCall(call)
	if n != 3+4*len(req.Limits) {
		return fmt.Errorf("rate-limit script: reply of %d values for %d limits", n, len(req.Limits))
	}
	return nil
}

// prepareAtCost is prepare for a call that consumes req's limits at costs
// that vary call by call (a charge, a lease): the arguments are looked up
// with the cost cleared, so the cache holds one entry per limit, and each
// limit gets a copy carrying its cost, never cached (one argument set per
// distinct cost would crowd the decisions' own out).
func (s *Store) prepareAtCost(req enforce.Request) (*redisCall, error) {
	norm := req
	norm.Limits = make([]enforce.Limit, len(req.Limits))
	for i, l := range req.Limits {
		l.Cost = 0
		norm.Limits[i] = l
	}
	call, err := s.prepare(norm, true, s.clock())
	if err != nil {
		return nil, err
	}
	for i := range call.limits {
		la := *call.limits[i]
		la.args[5] = costOf(req.Limits[i])
		call.limits[i] = &la
	}
	return call, nil
}

// costOf is l's cost with the default applied.
func costOf(l enforce.Limit) int64 {
	if l.Cost <= 0 {
		return 1
	}
	return l.Cost
}
