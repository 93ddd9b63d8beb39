package apikeys

import (
	"context"
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

	mu      sync.Mutex
	pending map[int64]time.Time
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

// Touch notes that key keyID was used at at. It never blocks on I/O.
func (l *LastUsed) Touch(keyID int64, at time.Time) {}

// Flush writes the pending times now.
func (l *LastUsed) Flush(ctx context.Context) error { return errNotImplemented }

// Run flushes every interval until ctx ends, then flushes once more so that
// a graceful shutdown loses nothing. It returns nil after the final flush.
func (l *LastUsed) Run(ctx context.Context) error { return errNotImplemented }
