package memstore

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice/internal/enforce"
)

// AddQuota adds units of consumption to the current period's count of
// req's one quota limit, as if requests costing units had been admitted,
// and returns the layer as it then stands. It is how consumption the store
// did not see comes back: a quota counter rebuilt from the ledger after
// Redis lost it, or admissions decided elsewhere (a local fallback) written
// back. The count may pass the limit; decisions then reject until the
// period renews.
func (s *Store) AddQuota(ctx context.Context, req enforce.Request, units int64) (enforce.LayerResult, error) {
	if units < 1 {
		return enforce.LayerResult{}, fmt.Errorf("%w: adding %d units", enforce.ErrInvalidRequest, units)
	}
	return s.adjust(ctx, req, -units)
}
