package redisstore

import (
	"context"
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
	call, err := s.prepareAtCost(req)
	if err != nil {
		return enforce.Decision{}, err
	}
	if err := s.do(ctx, call); err != nil {
		return enforce.Decision{}, err
	}
	d, err := decisionOf(call.reply, req, nil)
	s.putCall(call)
	return d, err
}

// Tally counts a decision made elsewhere from this store's budget (a
// leased or local one) in the usage statistics and decision metrics, as
// Allow counts its own.
func (s *Store) Tally(req enforce.Request, allowed bool) {
	s.TallyAt(req, allowed, s.clock())
}

// TallyAt is Tally for a decision made at the instant at, for a caller
// that has read the clock already (a lease store decides from memory, and
// a clock reading is a good part of what such a decision costs).
func (s *Store) TallyAt(req enforce.Request, allowed bool, at time.Time) {
	if s.usage {
		s.tally.add(req.Subject, req.Route, enforce.UsageBucketStart(at.Unix()), allowed, req.Key != "")
	}
	s.metrics.Count(allowed)
}
