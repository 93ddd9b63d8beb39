package ledger

import (
	"cmp"
	"context"
	"errors"
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

// WriteBack brings the shared counters of the quotas admitted locally in
// past outages up to the ledger, once the shared store answers again: a
// counter below the ledger's figure (its row plus this instance's tally)
// gets the difference, so admissions another instance or a rebuild already
// put back are not added twice. Run calls it after each flush; a quota
// whose row is not yet written (Postgres down) waits for the next.
func (l *Ledger) WriteBack(ctx context.Context) {
	l.mu.Lock()
	if l.inOutage.Load() || len(l.debt) == 0 {
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
		err := l.reconcile(ctx, k, e)
		if err != nil {
			l.mu.Lock()
			if t := l.debt[k]; t != nil {
				t.units += e.units
			} else {
				l.debt[k] = e
			}
			l.mu.Unlock()
			l.log.Warn("local quota admissions not yet written back; retried", "subject", k.subject, "quota", k.quota, "err", err)
		}
	}
}

// reconcile raises k's shared counter to the ledger's figure.
func (l *Ledger) reconcile(ctx context.Context, k key, e *entry) error {
	l.mu.Lock()
	unflushed := l.tally[k] != nil || l.flushing[k] != nil
	l.mu.Unlock()
	if unflushed {
		return errors.New("the tally is not yet in the ledger")
	}
	u, err := l.used(ctx, k)
	if err != nil {
		return err
	}
	d, err := l.shared.Peek(ctx, e.req)
	if err != nil {
		return err
	}
	lim := e.req.Limits[0].Limit
	if d.Layers[0].Remaining <= 0 {
		return nil // exhausted: more counts change nothing
	}
	if add := u - (lim - d.Layers[0].Remaining); add > 0 {
		if _, err := l.shared.AddQuota(ctx, e.req, add); err != nil {
			return err
		}
		l.log.Info("local quota admissions written back", "subject", k.subject, "quota", k.quota, "units", add)
	}
	return nil
}
