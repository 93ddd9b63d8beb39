package region

import (
	"context"
	"strings"

	"github.com/sluicehq/sluice/internal/enforce"
)

// LocalShare wraps the local store a failover.Store falls back on in a sync
// region, so that a region whose own Redis is down holds to its share of
// every limit (by weight), as it does when a peer is cut off: the local
// store then cannot count the peers' consumption, and the full limit
// divided by the instances alone would let the regions together admit
// up to the sum of their full limits. In share mode the region already
// asks for its share, so the local store needs no wrapping (LocalShare
// returns local as it is); in shared mode there is one Redis and no share.
func LocalShare(local enforce.Store, cfg Config) enforce.Store {
	if cfg.Mode != Sync {
		return local
	}
	return &localShare{next: local, num: cfg.weight(cfg.Region), den: cfg.totalWeight()}
}

type localShare struct {
	next     enforce.Store
	num, den int64
}

// scale returns req with every limit but the shares the sync fallback
// already asks for (named with shareSuffix) at the region's share.
func (s *localShare) scale(req enforce.Request) enforce.Request {
	limits := make([]enforce.Limit, len(req.Limits))
	for i, l := range req.Limits {
		if !strings.HasSuffix(l.Name, shareSuffix) {
			l.Limit = max(l.Limit*s.num/s.den, 1)
			if l.Burst > 0 {
				l.Burst = max(l.Burst*s.num/s.den, 1)
			}
		}
		limits[i] = l
	}
	req.Limits = limits
	return req
}

func (s *localShare) Allow(ctx context.Context, req enforce.Request) (enforce.Decision, error) {
	return s.next.Allow(ctx, s.scale(req))
}

func (s *localShare) Peek(ctx context.Context, req enforce.Request) (enforce.Decision, error) {
	return s.next.Peek(ctx, s.scale(req))
}

// Unwrap returns the local store.
func (s *localShare) Unwrap() enforce.Store { return s.next }
