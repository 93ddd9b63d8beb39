package ledger

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
)

// GrantQuota grants units of req's one quota on the shared store (see
// redisstore.Store.GrantQuota) and records the grant in the ledger, so
// a counter rebuilt after a loss keeps it.
func (l *Ledger) GrantQuota(ctx context.Context, req enforce.Request, units int64) (enforce.LayerResult, error) {
	lr, err := l.shared.GrantQuota(ctx, req, units)
	if err != nil {
		return lr, err
	}
	return lr, l.adjusted(ctx, req, -units, false)
}

// ResetQuota resets req's one quota on the shared store and in the ledger:
// without the ledger's reset, the next decision would find the counter
// empty and rebuild it to the consumption the operator reset.
func (l *Ledger) ResetQuota(ctx context.Context, req enforce.Request) (enforce.LayerResult, error) {
	lr, err := l.shared.ResetQuota(ctx, req)
	if err != nil {
		return lr, err
	}
	return lr, l.adjusted(ctx, req, 0, true)
}

const (
	addLedger = `
INSERT INTO quota_ledger (subject, quota, scope, period_start, period_end, used)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (subject, quota, scope, period_start) DO UPDATE
SET used = quota_ledger.used + EXCLUDED.used, updated_at = now()`
	resetLedger = `
INSERT INTO quota_ledger (subject, quota, scope, period_start, period_end, used)
VALUES ($1, $2, $3, $4, $5, 0)
ON CONFLICT (subject, quota, scope, period_start) DO UPDATE
SET used = 0, updated_at = now()`
)

// adjusted writes a grant (units < 0 taken off) or a reset to req's row,
// and forgets this instance's tally of the period on a reset.
func (l *Ledger) adjusted(ctx context.Context, req enforce.Request, units int64, reset bool) error {
	q := req.Limits[0]
	start, end := enforce.QuotaPeriod(q, req.Anchor, time.Now())
	k := key{subject: req.Subject, quota: q.Name, start: start.UnixMicro()}
	if q.PerKey {
		k.scope = req.Key
	}
	var err error
	if reset {
		l.mu.Lock()
		delete(l.tally, k)
		delete(l.debt, k)
		l.mu.Unlock()
		_, err = l.pool.Exec(ctx, resetLedger, k.subject, k.quota, k.scope, start.UTC(), end.UTC())
	} else {
		_, err = l.pool.Exec(ctx, addLedger, k.subject, k.quota, k.scope, start.UTC(), end.UTC(), units)
	}
	if err != nil {
		return fmt.Errorf("quota ledger: record the adjustment of %s %s: %w", k.subject, k.quota, err)
	}
	return nil
}
