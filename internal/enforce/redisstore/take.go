package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
)

// Take is Allow for a lease (see enforce/leased): req's limits are decided
// and consumed at the costs given, which are the units leased, all or
// nothing, in one script call beside the decisions. Unlike Allow it counts
// no usage (the lease's requests are counted as they are decided, see
// Tally), never feeds or reads the negative cache, and keeps the costs out
// of the arguments' cache, whose entries are per limit.
func (s *Store) Take(ctx context.Context, req enforce.Request) (enforce.Decision, error) {
	if err := enforce.ValidateRequest(req); err != nil {
		return enforce.Decision{}, err
	}
	if refused := s.refused.Load(); refused != nil {
		return enforce.Decision{}, *refused
	}
	norm := req
	norm.Limits = make([]enforce.Limit, len(req.Limits))
	for i, l := range req.Limits {
		l.Cost = 0
		norm.Limits[i] = l
	}
	call, err := s.prepare(norm, true, s.clock())
	if err != nil {
		return enforce.Decision{}, err
	}
	for i := range call.limits {
		la := *call.limits[i]
		la.args[5] = costOf(req.Limits[i])
		call.limits[i] = &la
	}
	if err := s.do(ctx, call); err != nil {
		return enforce.Decision{}, err
	}
	reply := call.reply
	if len(reply) != 3+4*len(req.Limits) {
		s.putCall(call)
		return enforce.Decision{}, fmt.Errorf("rate-limit script: reply of %d values for %d limits", len(reply), len(req.Limits))
	}
	d := enforce.Decision{
		Allowed: reply[0] == 1,
		At:      time.UnixMicro(reply[2]),
		Layers:  make([]enforce.LayerResult, len(req.Limits)),
	}
	for i, l := range req.Limits {
		r := reply[3+4*i:]
		d.Layers[i] = enforce.LayerOut{Allowed: r[0] == 1, Remaining: r[1], Reset: r[2], Retry: r[3]}.Result(l)
	}
	s.putCall(call)
	return d, nil
}

// Tally counts a decision made elsewhere from this store's budget (a
// leased or local one) in the usage statistics and decision metrics, as
// Allow counts its own.
func (s *Store) Tally(req enforce.Request, allowed bool) {
	if s.usage {
		s.tally.add(req.Subject, req.Route, enforce.UsageBucketStart(s.clock().Unix()), allowed, req.Key != "")
	}
	s.metrics.Count(allowed)
}
