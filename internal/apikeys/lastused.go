package apikeys

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// MinTouchGap is the least time between two last_used_at writes for one key.
const MinTouchGap = time.Minute

// LastUsed records when keys were last used without a database write per
// request: Touch only notes the time in memory, and Run writes the noted
// times in one batched UPDATE per interval, at most once per key per
// MinTouchGap. It is safe for concurrent use.
type LastUsed struct {
	pool     *pgxpool.Pool
	logger   *slog.Logger
	interval time.Duration

	mu sync.Mutex
	// pending holds the newest unwritten use of each key.
	pending map[int64]time.Time
	// written holds the last time written per key, to space writes out.
	written map[int64]time.Time
}

// NewLastUsed returns a recorder that flushes every interval (a minute if
// interval <= 0). Start it with Run.
func NewLastUsed(pool *pgxpool.Pool, logger *slog.Logger, interval time.Duration) *LastUsed {
	if interval <= 0 {
		interval = time.Minute
	}
	return &LastUsed{pool: pool, logger: logger, interval: interval,
		pending: map[int64]time.Time{}, written: map[int64]time.Time{}}
}

// Touch notes that key keyID was used at at. It never blocks on I/O; a use
// within MinTouchGap of the last written one is dropped, since last_used_at
// is only meant to the minute.
func (l *LastUsed) Touch(keyID int64, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if w, ok := l.written[keyID]; ok && at.Sub(w) < MinTouchGap {
		return
	}
	if p, ok := l.pending[keyID]; !ok || at.After(p) {
		l.pending[keyID] = at
	}
}

// The GREATEST keeps a slow instance from moving last_used_at backwards.
const flushLastUsed = `
UPDATE api_keys k
SET last_used_at = GREATEST(k.last_used_at, v.at)
FROM unnest($1::bigint[], $2::timestamptz[]) AS v(id, at)
WHERE k.id = v.id`

// Flush writes the pending times now, in one statement. On failure the
// times stay pending for the next flush.
func (l *LastUsed) Flush(ctx context.Context) error {
	l.mu.Lock()
	batch := l.pending
	l.pending = make(map[int64]time.Time, len(batch))
	l.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	ids := make([]int64, 0, len(batch))
	ats := make([]time.Time, 0, len(batch))
	for id, at := range batch {
		ids = append(ids, id)
		ats = append(ats, at)
	}
	if _, err := l.pool.Exec(ctx, flushLastUsed, ids, ats); err != nil {
		l.mu.Lock()
		for id, at := range batch {
			if p, ok := l.pending[id]; !ok || at.After(p) {
				l.pending[id] = at
			}
		}
		l.mu.Unlock()
		return fmt.Errorf("flush last used: %w", err)
	}
	l.mu.Lock()
	for id, at := range batch {
		l.written[id] = at
	}
	l.mu.Unlock()
	return nil
}

// Run flushes every interval until ctx ends, then flushes once more (with a
// short timeout of its own) so that a graceful shutdown loses nothing. A
// failed flush is logged and retried at the next tick. It returns nil.
func (l *LastUsed) Run(ctx context.Context) error {
	t := time.NewTicker(l.interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			if err := l.Flush(ctx); err != nil {
				l.logger.Warn("last-used flush failed; will retry", "err", err)
			}
		case <-ctx.Done():
			final, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			err := l.Flush(final)
			cancel()
			if err != nil {
				l.logger.Warn("final last-used flush failed", "err", err)
			}
			return nil
		}
	}
}
