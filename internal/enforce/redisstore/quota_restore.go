package redisstore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/sluicehq/sluice/internal/enforce"
)

// AddQuota is memstore.Store.AddQuota on Redis, atomic with decisions.
func (s *Store) AddQuota(ctx context.Context, req enforce.Request, units int64) (enforce.LayerResult, error) {
	if units < 1 {
		return enforce.LayerResult{}, fmt.Errorf("%w: adding %d units", enforce.ErrInvalidRequest, units)
	}
	return s.adjust(ctx, req, strconv.FormatInt(-units, 10))
}
