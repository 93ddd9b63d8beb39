package leased

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
)

// decide runs one request with a leased or local layer, all or nothing:
// leased units reserved, then local layers decided, then exact ones.
func (s *Store) decide(ctx context.Context, req enforce.Request, layers []enforce.LayerResult) (enforce.Decision, error) {
	now := s.now()
	if cap(layers) < len(req.Limits) {
		layers = make([]enforce.LayerResult, len(req.Limits))
	}
	layers = layers[:len(req.Limits)]
	// A plan's few layers fit these without an allocation.
	var exactA, localA [enforce.MaxInlineLayers]int
	var heldA [enforce.MaxInlineLayers]reservation
	exact, local, held := exactA[:0], localA[:0], heldA[:0]
	release := func() {
		for _, r := range held {
			s.release(r)
		}
	}
	rejected := false
	var leaseAt time.Time // the shared store's clock, as the first lease tells it
	var sl *subjectLeases // the subject's leases, looked up once
	for i := range req.Limits {
		switch req.Limits[i].Precision {
		case enforce.PrecisionLocal:
			local = append(local, i)
			continue
		case enforce.PrecisionLeased:
		default:
			exact = append(exact, i)
			continue
		}
		if rejected {
			// Already refused: the rest is only peeked, below.
			exact = append(exact, i)
			continue
		}
		if sl == nil {
			sl = s.subject(req.Subject)
		}
		lr := &layers[i]
		r, at, ok := s.reserve(ctx, &req, i, sl, now, lr)
		if !ok {
			// No lease could be taken: decided as exact, by the inner
			// store and its failure mode.
			s.stats.Fallbacks.Add(1)
			exact = append(exact, i)
			continue
		}
		if leaseAt.IsZero() {
			leaseAt = at
		}
		if r.lease != nil {
			held = append(held, r)
		}
		if !lr.Allowed && lr.Limit.Mode != enforce.ModeShadow {
			rejected = true
		}
	}
	if rejected {
		release()
		return s.refuse(ctx, req, layers, exact, local, leaseAt, now)
	}

	var localReq enforce.Request
	var localAt time.Time
	if len(local) > 0 {
		localReq = req
		localReq.Limits = s.localShares(req, local)
		d, err := s.local.Allow(ctx, localReq)
		if err != nil {
			release()
			return enforce.Decision{}, err
		}
		for j, i := range local {
			layers[i] = d.Layers[j]
			layers[i].Limit = req.Limits[i]
		}
		if !d.Allowed {
			release()
			return s.refuse(ctx, req, layers, exact, nil, leaseAt, now)
		}
		localAt = d.At
	}

	out := enforce.Decision{At: leaseAt}
	if out.At.IsZero() {
		out.At = now
	}
	if len(exact) > 0 {
		d, err := s.inner.Allow(ctx, subset(req, exact, false, 0))
		if err != nil || !d.Allowed {
			release()
			if len(local) > 0 {
				s.refundLocal(ctx, localReq, localAt)
			}
			if err != nil {
				return enforce.Decision{}, err
			}
		}
		for j, i := range exact {
			layers[i] = d.Layers[j]
		}
		if !d.Allowed {
			// The inner store counted the rejection.
			return enforce.Decision{Allowed: false, Layers: layers, At: d.At, Local: d.Local, RegionShare: d.RegionShare}, nil
		}
		out.At, out.Delay, out.Local, out.RegionShare = d.At, d.Delay, d.Local, d.RegionShare
	} else if s.tally != nil {
		s.tally.TallyAt(req, true, now)
	}
	out.Allowed, out.Layers = true, layers
	s.stats.Admitted.Add(1)
	return out, nil
}

// refuse completes a rejected request's layers: the exact ones and the
// local ones not yet decided are peeked, so the answer shows every layer
// and nothing is consumed. now is the instance's clock at the decision.
func (s *Store) refuse(ctx context.Context, req enforce.Request, layers []enforce.LayerResult, exact, local []int, at, now time.Time) (enforce.Decision, error) {
	out := enforce.Decision{Layers: layers, At: at}
	if at.IsZero() {
		out.At = now
	}
	if len(exact) > 0 {
		d, err := s.inner.Peek(ctx, subset(req, exact, false, 0))
		if err != nil {
			return enforce.Decision{}, err
		}
		for j, i := range exact {
			layers[i] = d.Layers[j]
			layers[i].Limit = req.Limits[i]
		}
		out.At, out.Local, out.RegionShare = d.At, d.Local, d.RegionShare
	}
	if len(local) > 0 {
		d, err := s.local.Peek(ctx, subset(req, local, true, int64(s.instances)))
		if err != nil {
			return enforce.Decision{}, err
		}
		for j, i := range local {
			layers[i] = d.Layers[j]
			layers[i].Limit = req.Limits[i]
		}
	}
	if s.tally != nil {
		s.tally.TallyAt(req, false, now)
	}
	return out, nil
}

// refundLocal gives back what the local layers consumed for a request the
// exact layers then refused. A sliding log keeps its entry (it is not
// refundable): the instance's own share holds one request more until it
// leaves the window.
func (s *Store) refundLocal(ctx context.Context, req enforce.Request, at time.Time) {
	_ = s.local.Refund(ctx, req, at)
}
