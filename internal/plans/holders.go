package plans

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Holders is who holds a plan directly, which is what keeps Delete from
// removing it: the developers on it and the live keys set to it.
type Holders struct {
	// Developers are emails; Keys are "name (owner's email)".
	Developers []string
	Keys       []string
	// More is how many further holders were left out of the lists.
	More int
}

const (
	selectPlanHolders = `
SELECT 'developer', email FROM users WHERE plan_id = $1
UNION ALL
SELECT 'key', k.name || ' (' || u.email || ')'
FROM api_keys k JOIN users u ON u.id = k.user_id
WHERE k.plan_id = $1 AND k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > now())
ORDER BY 1, 2`
)

// Holders lists up to limit of the developers and live keys assigned the
// plan directly, for saying why it cannot be deleted.
func (s *Service) Holders(ctx context.Context, id int64, limit int) (Holders, error) {
	rows, err := s.pool.Query(ctx, selectPlanHolders, id)
	if err != nil {
		return Holders{}, fmt.Errorf("holders of plan %d: %w", id, err)
	}
	var h Holders
	var kind, who string
	_, err = pgx.ForEachRow(rows, []any{&kind, &who}, func() error {
		switch {
		case len(h.Developers)+len(h.Keys) >= limit:
			h.More++
		case kind == "developer":
			h.Developers = append(h.Developers, who)
		default:
			h.Keys = append(h.Keys, who)
		}
		return nil
	})
	if err != nil {
		return Holders{}, fmt.Errorf("holders of plan %d: %w", id, err)
	}
	return h, nil
}
