package requestlog

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Why partitions by day: retention and the caps then drop a whole day with
// one DROP TABLE, which costs the same for a thousand rows or a hundred
// million and leaves no dead tuples for vacuum, where a DELETE of the
// oldest rows would rewrite and vacuum as much as it removes. A day is the
// unit an operator thinks in ("keep 7 days"), and 30 partitions keep
// planning cheap.

// partitionLock serializes partition DDL across instances (an advisory
// lock key: "sluice-rl" in ASCII).
const partitionLock = 0x736c756963652d72

// ddlLockTimeout bounds how long partition DDL waits for a reader (a long
// CSV export) to let go of the parent table: it retries at the next flush
// or maintenance rather than queueing every other query behind it.
const ddlLockTimeout = "5s"

// partitions remembers which days have a partition, so a flush checks the
// catalog only for a day it has not seen.
type partitions struct {
	mu    sync.Mutex
	known map[string]bool // YYYYMMDD
}

func (p *partitions) forget() {
	p.mu.Lock()
	clear(p.known)
	p.mu.Unlock()
}

// ensure creates the partition of day (YYYYMMDD) unless it is known.
func (p *partitions) ensure(ctx context.Context, pool *pgxpool.Pool, day string) error {
	p.mu.Lock()
	ok := p.known[day]
	p.mu.Unlock()
	if ok {
		return nil
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := lockDDL(ctx, tx); err != nil {
			return err
		}
		return createPartition(ctx, tx, day)
	})
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.known[day] = true
	p.mu.Unlock()
	return nil
}

func lockDDL(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '"+ddlLockTimeout+"'"); err != nil {
		return fmt.Errorf("request log: %w", err)
	}
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(partitionLock)); err != nil {
		return fmt.Errorf("request log: partition lock: %w", err)
	}
	return nil
}

// partitionName is the table holding day (YYYYMMDD).
func partitionName(day string) string { return "request_log_p" + day }

func createPartition(ctx context.Context, tx pgx.Tx, day string) error {
	start, err := time.Parse("20060102", day)
	if err != nil {
		return fmt.Errorf("request log: partition day %q: %w", day, err)
	}
	end := start.AddDate(0, 0, 1)
	// The name and bounds come from a parsed date, never from input.
	sql := fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s PARTITION OF request_log FOR VALUES FROM ('%s') TO ('%s')`,
		partitionName(day), start.Format(time.RFC3339), end.Format(time.RFC3339))
	if _, err := tx.Exec(ctx, sql); err != nil {
		return fmt.Errorf("request log: create partition %s: %w", day, err)
	}
	return nil
}

// retentionStart is the first instant kept: the start of the UTC day that
// now-retention falls in. Older days are dropped whole.
func retentionStart(now time.Time, retention time.Duration) time.Time {
	return now.Add(-retention).UTC().Truncate(24 * time.Hour)
}

const listPartitions = `
SELECT c.relname, pg_total_relation_size(c.oid)
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = 'request_log'::regclass`

// Partition is one day of the log as maintenance sees it.
type Partition struct {
	Day   string // YYYYMMDD
	Rows  int64
	Bytes int64
}

// Maintain creates today's and tomorrow's partitions, drops those past the
// retention, and while the rows or bytes are over their caps drops the
// oldest day before today. It is what Run does every minute; the returned
// partitions are those left, oldest first.
func (w *Writer) Maintain(ctx context.Context) ([]Partition, error) {
	w.flushMu.Lock()
	defer w.flushMu.Unlock()
	now := w.now()
	parts, err := w.maintainParts(ctx, now)
	if err == nil {
		w.lastMain = now
	}
	return parts, err
}

func (w *Writer) maintain(ctx context.Context, now time.Time) error {
	_, err := w.maintainParts(ctx, now)
	return err
}

func (w *Writer) maintainParts(ctx context.Context, now time.Time) ([]Partition, error) {
	today := now.UTC().Format("20060102")
	tomorrow := now.UTC().AddDate(0, 0, 1).Format("20060102")
	oldest := retentionStart(now, w.opts.Retention).Format("20060102")
	var (
		parts   []Partition
		dropped []string
		full    bool
	)
	err := pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		parts, dropped, full = nil, nil, false
		if err := lockDDL(ctx, tx); err != nil {
			return err
		}
		for _, d := range []string{today, tomorrow} {
			if err := createPartition(ctx, tx, d); err != nil {
				return err
			}
		}
		var err error
		if parts, err = readPartitions(ctx, tx); err != nil {
			return err
		}
		drop := func(p Partition) error {
			if _, err := tx.Exec(ctx, "DROP TABLE IF EXISTS "+partitionName(p.Day)); err != nil {
				return fmt.Errorf("request log: drop partition %s: %w", p.Day, err)
			}
			dropped = append(dropped, p.Day)
			return nil
		}
		var rows, bytes int64
		kept := parts[:0]
		for _, p := range parts {
			if p.Day < oldest {
				if err := drop(p); err != nil {
					return err
				}
				continue
			}
			kept = append(kept, p)
			rows, bytes = rows+p.Rows, bytes+p.Bytes
		}
		parts = kept
		for (rows >= w.opts.MaxRows || bytes >= w.opts.MaxBytes) && len(parts) > 0 && parts[0].Day < today {
			if err := drop(parts[0]); err != nil {
				return err
			}
			rows, bytes = rows-parts[0].Rows, bytes-parts[0].Bytes
			parts = parts[1:]
		}
		full = rows >= w.opts.MaxRows || bytes >= w.opts.MaxBytes
		days := make([]string, len(parts))
		for i, p := range parts {
			days[i] = p.Day
		}
		if _, err := tx.Exec(ctx, `DELETE FROM request_log_days WHERE NOT (to_char(day, 'YYYYMMDD') = ANY($1))`, days); err != nil {
			return fmt.Errorf("request log: forget dropped days: %w", err)
		}
		w.rows = rows
		w.metrics.rows.Set(float64(rows))
		w.metrics.bytes.Set(float64(bytes))
		return nil
	})
	if err != nil {
		w.parts.forget()
		return nil, err
	}
	w.parts.mu.Lock()
	clear(w.parts.known)
	for _, p := range parts {
		w.parts.known[p.Day] = true
	}
	w.parts.mu.Unlock()
	if w.full.Swap(full) != full {
		if full {
			w.log.Warn("request log: the row or size cap is reached with only today's rows left; new rows are dropped until tomorrow or a higher cap",
				"max_rows", w.opts.MaxRows, "max_bytes", w.opts.MaxBytes)
		} else {
			w.log.Info("request log: below its caps again; rows are written")
		}
	}
	if len(dropped) > 0 {
		w.log.Info("request log: dropped days", "days", strings.Join(dropped, ","))
	}
	return parts, nil
}

// readPartitions lists the log's partitions, oldest first, with their row
// counts (request_log_days) and sizes.
func readPartitions(ctx context.Context, tx pgx.Tx) ([]Partition, error) {
	rows, err := tx.Query(ctx, listPartitions)
	if err != nil {
		return nil, fmt.Errorf("request log: list partitions: %w", err)
	}
	var parts []Partition
	var name string
	var size int64
	_, err = pgx.ForEachRow(rows, []any{&name, &size}, func() error {
		if day, ok := strings.CutPrefix(name, "request_log_p"); ok && len(day) == 8 {
			parts = append(parts, Partition{Day: day, Bytes: size})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("request log: list partitions: %w", err)
	}
	slices.SortFunc(parts, func(a, b Partition) int { return strings.Compare(a.Day, b.Day) })
	counts := map[string]int64{}
	rows, err = tx.Query(ctx, `SELECT to_char(day, 'YYYYMMDD'), rows FROM request_log_days`)
	if err != nil {
		return nil, fmt.Errorf("request log: day counts: %w", err)
	}
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&name, &n}, func() error { counts[name] = n; return nil })
	if err != nil {
		return nil, fmt.Errorf("request log: day counts: %w", err)
	}
	for i := range parts {
		parts[i].Rows = counts[parts[i].Day]
	}
	return parts, nil
}
