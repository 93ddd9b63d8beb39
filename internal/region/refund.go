package region

import (
	"context"
	"errors"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
)

// Refund gives back units of a decision made at `at` to this region's
// store, with the limits as the region decided them (its share in share
// mode). In sync mode the units also come off what awaits publication to
// the peers, when it has not gone yet; once published, the peers count
// them until their window ends, which only ever admits less.
func (s *Store) Refund(ctx context.Context, req enforce.Request, at time.Time) error {
	r, ok := s.next.(enforce.Refunder)
	if !ok {
		return errors.ErrUnsupported
	}
	switch s.cfg.Mode {
	case Share:
		scaled := req
		scaled.Limits = make([]enforce.Limit, len(req.Limits))
		for i, l := range req.Limits {
			scaled.Limits[i] = s.ShareLimit(l)
		}
		return r.Refund(ctx, scaled, at)
	case Sync:
		s.unrecord(req, at)
	}
	return r.Refund(ctx, req, at)
}

// unrecord takes req's units off the subject's consumption awaiting
// publication, for the window `at` fell in.
func (s *Store) unrecord(req enforce.Request, at time.Time) {
	us := at.UnixMicro()
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pending[req.Subject]
	if p == nil {
		return
	}
	for _, l := range req.Limits {
		w, units := windowOf(l, us), cost(l)
		for i := range p.limits {
			pl := &p.limits[i]
			if pl.window == w && sameState(pl.limit, l) {
				pl.limit.Cost = max(pl.limit.Cost-units, 0)
			}
		}
	}
}
