package enforce

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// AddQuota adds units of consumption to the current period's count of
// req's one quota limit, as if requests costing units had been admitted,
// and returns the layer as it then stands. It is how consumption the store
// did not see comes back: a quota counter rebuilt from the ledger after
// Redis lost it, or admissions decided elsewhere (a local fallback) written
// back. The count may pass the limit; decisions then reject until the
// period renews.
func (s *MemoryStore) AddQuota(ctx context.Context, req Request, units int64) (LayerResult, error) {
	if units < 1 {
		return LayerResult{}, fmt.Errorf("%w: adding %d units", ErrInvalidRequest, units)
	}
	return s.adjust(ctx, req, -units)
}

// AddQuota is MemoryStore.AddQuota on Redis, atomic with decisions.
func (s *RedisStore) AddQuota(ctx context.Context, req Request, units int64) (LayerResult, error) {
	if units < 1 {
		return LayerResult{}, fmt.Errorf("%w: adding %d units", ErrInvalidRequest, units)
	}
	return s.adjust(ctx, req, strconv.FormatInt(-units, 10))
}

// QuotaPeriod returns the start and end of the period of quota l that
// holds at, for a subject anchored at anchor (Request.Anchor): the
// calendar both stores decide on.
func QuotaPeriod(l Limit, anchor, at time.Time) (start, end time.Time) {
	code := periodCode(l.Period)
	if code == "" {
		code = codeQuotaMonth
	}
	s, e := periodBounds(code, at.UnixMicro(), anchorMicros(anchor))
	return time.UnixMicro(s), time.UnixMicro(e)
}
