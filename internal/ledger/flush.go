package ledger

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Run flushes the tally and writes local admissions back every
// FlushInterval until ctx ends, then flushes once more with a timeout of
// its own. Failures are logged and retried. It returns nil.
func (l *Ledger) Run(ctx context.Context) error {
	t := time.NewTicker(l.every)
	defer t.Stop()
	var pruned time.Time
	for {
		select {
		case <-t.C:
			if err := l.Flush(ctx); err != nil {
				l.log.Warn("quota ledger flush failed; the tally is kept and retried", "err", err)
			}
			l.WriteBack(ctx)
			if time.Since(pruned) > time.Hour {
				if _, err := l.pool.Exec(ctx, pruneLedger, time.Now().Add(-pruneAfter)); err != nil {
					l.log.Warn("quota ledger prune failed", "err", err)
				} else {
					pruned = time.Now()
				}
			}
		case <-ctx.Done():
			final, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			err := l.Flush(final)
			cancel()
			if err != nil {
				l.log.Warn("final quota ledger flush failed", "err", err)
			}
			return nil
		}
	}
}

const pruneLedger = `DELETE FROM quota_ledger WHERE period_end < $1`

const upsertLedger = `
INSERT INTO quota_ledger (subject, quota, scope, period_start, period_end, used)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::timestamptz[], $6::bigint[])
ON CONFLICT (subject, quota, scope, period_start) DO UPDATE
SET used = quota_ledger.used + EXCLUDED.used, updated_at = now()`

// Flush adds the tally to Postgres in one statement. On failure the batch
// goes back into the tally for the next flush.
func (l *Ledger) Flush(ctx context.Context) error {
	l.mu.Lock()
	if len(l.flushing) > 0 || len(l.tally) == 0 {
		l.mu.Unlock()
		return nil // a flush is in flight, or nothing to write
	}
	l.tally, l.flushing = l.flushing, l.tally
	batch := l.flushing
	l.mu.Unlock()

	keys := slices.SortedFunc(maps.Keys(batch), func(a, b key) int {
		return cmp.Or(strings.Compare(a.subject, b.subject), strings.Compare(a.quota, b.quota),
			strings.Compare(a.scope, b.scope), cmp.Compare(a.start, b.start))
	})
	var (
		subject, quota, scope []string
		start, end            []time.Time
		used                  []int64
	)
	for _, k := range keys {
		e := batch[k]
		subject, quota, scope = append(subject, k.subject), append(quota, k.quota), append(scope, k.scope)
		start = append(start, time.UnixMicro(k.start).UTC())
		end = append(end, time.UnixMicro(e.end).UTC())
		used = append(used, e.units)
	}
	_, err := l.pool.Exec(ctx, upsertLedger, subject, quota, scope, start, end, used)

	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		for k, e := range batch {
			if t := l.tally[k]; t != nil {
				t.units += e.units
			} else {
				l.tally[k] = e
			}
		}
	}
	l.flushing = map[key]*entry{}
	if err != nil {
		return fmt.Errorf("quota ledger: flush %d rows: %w", len(keys), err)
	}
	return nil
}

// WriteBack adds the local admissions of past outages to the shared
// counters, once the shared store answers again. A counter the shared
// store lost meanwhile is rebuilt from the ledger instead (which holds
// them).
func (l *Ledger) WriteBack(ctx context.Context) {
	l.mu.Lock()
	if l.inOutage || len(l.debt) == 0 {
		l.mu.Unlock()
		return
	}
	owed := l.debt
	l.debt = map[key]*entry{}
	l.mu.Unlock()

	now := time.Now().UnixMicro()
	for k, e := range owed {
		if e.end <= now {
			continue // the period is over
		}
		got, err := l.shared.AddQuota(ctx, e.req, e.units)
		if err != nil {
			l.mu.Lock()
			if t := l.debt[k]; t != nil {
				t.units += e.units
			} else {
				l.debt[k] = e
			}
			l.mu.Unlock()
			l.log.Warn("local quota admissions not yet written back; retried", "subject", k.subject, "quota", k.quota, "err", err)
			continue
		}
		lim := e.req.Limits[0].Limit
		if got.Remaining == max(lim-e.units, 0) && lim-e.units >= 0 {
			// The counter held nothing before: rebuild it to the ledger's
			// figure, which includes these units.
			u, err := l.used(ctx, k)
			if err == nil && u > e.units {
				_, err = l.shared.AddQuota(ctx, e.req, u-e.units)
			}
			if err != nil {
				l.log.Warn("quota counter found empty on write-back; not rebuilt", "subject", k.subject, "quota", k.quota, "err", err)
			}
		}
		l.log.Info("local quota admissions written back", "subject", k.subject, "quota", k.quota, "units", e.units)
	}
}
