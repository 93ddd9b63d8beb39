package failover

import "github.com/sluicehq/sluice/internal/enforce"

// Tally counts a decision in the usage of the store deciding now: the
// primary, or the local store while the breaker bypasses it.
func (s *Store) Tally(req enforce.Request, allowed bool) {
	store := s.primary
	if s.BreakerState() == "open" && s.local != nil {
		store = s.local
	}
	if t := enforce.TallyOf(store); t != nil {
		t.Tally(req, allowed)
	}
}
