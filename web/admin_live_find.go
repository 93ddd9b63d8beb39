package web

import (
	"context"
	"strings"

	"github.com/sluicehq/sluice/internal/apikeys"
)

// liveSearch finds the keys to watch from what an operator knows: a prefix,
// part of a name or an owner's email (the keys list's search), newest
// active keys first, at most as many as the live view watches.
func (s *Server) liveSearch(ctx context.Context, q string) ([]int64, error) {
	keys, _, err := s.deps.Keys.List(ctx, apikeys.Filter{Query: strings.TrimSpace(q), State: apikeys.StateActive, Limit: maxLiveKeys})
	if err != nil {
		return nil, err
	}
	ids := make([]int64, len(keys))
	for i, k := range keys {
		ids[i] = k.ID
	}
	return ids, nil
}
