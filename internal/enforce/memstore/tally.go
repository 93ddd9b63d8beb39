package memstore

import "github.com/sluicehq/sluice/internal/enforce"

// Tally counts a decision made without Allow in the usage series (see
// enforce.Tallier), as Allow counts its own.
func (s *Store) Tally(req enforce.Request, allowed bool) {
	if !s.usage || enforce.ValidateSubject(req.Subject) != nil {
		return
	}
	now := s.clock()
	route := s.routes.id(req.Route)
	sh, h := s.locate(req.Subject)
	sub := sh.add(h, req.Subject, now, s.sweepEvery, s.shardMax, s.evictions)
	sub.mu.Lock()
	if !sub.dead {
		sub.recordUsage(route, now, allowed)
		sub.last = max(sub.last, now)
	}
	sub.mu.Unlock()
}
