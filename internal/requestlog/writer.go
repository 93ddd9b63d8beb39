package requestlog

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of Options.
const (
	DefaultBufferSize    = 65_536
	DefaultFlushInterval = time.Second
	DefaultRetention     = 7 * 24 * time.Hour
	DefaultMaxRows       = 20_000_000
	DefaultMaxBytes      = 8 << 30
	// DefaultAdmitSample keeps one admission in 100; DefaultRejectSample
	// keeps every rejection.
	DefaultAdmitSample  = 100
	DefaultRejectSample = 1
	maintainEvery       = time.Minute
)

// Observer is told of every entry the Writer accepted, sampled or not, once
// each, from Run's goroutine (never on the request path): the analytics
// rollups count from it exactly.
type Observer interface {
	Observe(e *Entry)
}

// Options configure a Writer; zero fields take the defaults.
type Options struct {
	// BufferSize bounds the entries held between two flushes
	// (DefaultBufferSize, about 180 bytes each), and apart the sampled rows
	// kept while Postgres is unreachable. Entries that do not fit are
	// dropped and counted.
	BufferSize int
	// FlushInterval is how often the buffer is written (DefaultFlushInterval);
	// a buffer half full is written at once.
	FlushInterval time.Duration
	// AdmitSample stores one in AdmitSample requests that reached the API
	// without a limit firing (admitted, queued, failed open), each row then
	// standing for AdmitSample of them (its weight). Negative stores none;
	// 0 means DefaultAdmitSample.
	AdmitSample int
	// RejectSample does the same for the others: rejected, degraded,
	// unavailable, unauthorized (0 means DefaultRejectSample: all of them).
	RejectSample int
	// Retention is how long rows are kept (DefaultRetention), rounded up to
	// whole UTC days: a day's partition is dropped once all of it is older.
	Retention time.Duration
	// MaxRows and MaxBytes cap the log (rows, and bytes with indexes);
	// past either the oldest days are dropped, and while the current day
	// alone is over, new rows are dropped and counted.
	MaxRows  int64
	MaxBytes int64
	// Observer, when set, is told of every entry (see Observer).
	Observer Observer
	Logger   *slog.Logger
	// Registerer, when set, receives sluice_request_log_written_total,
	// sluice_request_log_dropped_total{reason}, sluice_request_log_rows
	// and sluice_request_log_bytes.
	Registerer prometheus.Registerer
	// Now is the clock retention is measured on (time.Now).
	Now func() time.Time
	// Keep decides whether to store an entry that stands for n entries
	// (1 in n); nil draws at random. Tests set it for exact counts.
	Keep func(n int) bool
}

// Writer buffers entries and writes them to Postgres. It is safe for
// concurrent use; create it with NewWriter and start it with Run.
type Writer struct {
	pool *pgxpool.Pool
	opts Options
	log  *slog.Logger
	now  func() time.Time
	keep func(n int) bool

	mu   sync.Mutex
	buf  []Entry // filled by Log, capacity BufferSize
	wake chan struct{}

	// Run's own state, under flushMu.
	flushMu  sync.Mutex
	spare    []Entry
	pending  []row // sampled rows not yet written
	parts    partitions
	lastMain time.Time
	// full is set while the caps are reached and no old day is left to
	// drop: new rows are then dropped.
	full atomic.Bool
	// rows counts the stored rows as of the last maintenance plus those
	// written since, to run maintenance early when it crosses MaxRows.
	rows int64

	metrics writerMetrics
}

type writerMetrics struct {
	written prometheus.Counter
	dropped *prometheus.CounterVec
	rows    prometheus.Gauge
	bytes   prometheus.Gauge
	// queueFull is dropped{reason="queue_full"}, resolved once: Log
	// increments it without a label lookup.
	queueFull prometheus.Counter
}

// Reasons of sluice_request_log_dropped_total.
const (
	dropQueueFull   = "queue_full"  // the buffer was full: Run did not keep up
	dropUnavailable = "unavailable" // Postgres failed for longer than the buffer holds
	dropFull        = "full"        // the caps are reached
	dropExpired     = "expired"     // older than the retention when written
)

// NewWriter returns a writer to pool.
func NewWriter(pool *pgxpool.Pool, opts Options) *Writer {
	if opts.BufferSize <= 0 {
		opts.BufferSize = DefaultBufferSize
	}
	if opts.FlushInterval <= 0 {
		opts.FlushInterval = DefaultFlushInterval
	}
	if opts.AdmitSample == 0 {
		opts.AdmitSample = DefaultAdmitSample
	}
	if opts.RejectSample == 0 {
		opts.RejectSample = DefaultRejectSample
	}
	if opts.Retention <= 0 {
		opts.Retention = DefaultRetention
	}
	if opts.MaxRows <= 0 {
		opts.MaxRows = DefaultMaxRows
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	w := &Writer{
		pool: pool, opts: opts, log: opts.Logger, now: opts.Now, keep: opts.Keep,
		buf: make([]Entry, 0, opts.BufferSize), spare: make([]Entry, 0, opts.BufferSize),
		wake: make(chan struct{}, 1), parts: partitions{known: map[string]bool{}},
	}
	if w.log == nil {
		w.log = slog.New(slog.DiscardHandler)
	}
	if w.now == nil {
		w.now = time.Now
	}
	if w.keep == nil {
		w.keep = func(n int) bool { return n == 1 || rand.IntN(n) == 0 }
	}
	w.metrics = writerMetrics{
		written: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_request_log_written_total",
			Help: "Rows written to the request log.",
		}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_request_log_dropped_total",
			Help: "Request log entries dropped, by reason: queue_full (the writer did not keep up), unavailable (Postgres failed for longer than the buffer holds), full (the row or size cap is reached), expired (older than the retention).",
		}, []string{"reason"}),
		rows: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_request_log_rows",
			Help: "Rows in the request log, as of the last maintenance.",
		}),
		bytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_request_log_bytes",
			Help: "Size of the request log's partitions with their indexes, as of the last maintenance.",
		}),
	}
	w.metrics.queueFull = w.metrics.dropped.WithLabelValues(dropQueueFull)
	for _, r := range []string{dropUnavailable, dropFull, dropExpired} {
		w.metrics.dropped.WithLabelValues(r)
	}
	if opts.Registerer != nil {
		opts.Registerer.MustRegister(w.metrics.written, w.metrics.dropped, w.metrics.rows, w.metrics.bytes)
	}
	return w
}

// Log accepts one entry, to be written by Run. It never blocks on I/O and
// never allocates: the entry is copied into the buffer, or dropped and
// counted when the buffer is full.
func (w *Writer) Log(e Entry) {
	w.mu.Lock()
	n := len(w.buf)
	if n == cap(w.buf) {
		w.mu.Unlock()
		w.metrics.queueFull.Inc()
		return
	}
	w.buf = append(w.buf, e)
	half := n+1 == cap(w.buf)/2 // read under the lock: Run swaps the buffer
	w.mu.Unlock()
	if half {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// Run writes the buffer every FlushInterval (or when it is half full) until
// ctx ends, then once more with a timeout of its own, so a clean stop loses
// nothing. Failed writes are logged and retried. It returns nil.
func (w *Writer) Run(ctx context.Context) error {
	t := time.NewTicker(w.opts.FlushInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-w.wake:
		case <-ctx.Done():
			final, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			err := w.Flush(final)
			cancel()
			if err != nil {
				w.log.Warn("final request log flush failed", "err", err)
			}
			return nil
		}
		if err := w.Flush(ctx); err != nil && ctx.Err() == nil {
			w.log.Warn("request log flush failed; the rows are kept and retried", "err", err)
		}
	}
}

// Flush writes everything logged so far: each entry goes to the Observer,
// the sampled ones to Postgres in one COPY. Partitions are created as
// needed, and the retention and caps enforced every minute. On failure the
// sampled rows stay pending for the next flush, within BufferSize.
func (w *Writer) Flush(ctx context.Context) error {
	w.flushMu.Lock()
	defer w.flushMu.Unlock()

	w.mu.Lock()
	batch := w.buf
	w.buf, w.spare = w.spare[:0], batch
	w.mu.Unlock()

	var lost int
	for i := range batch {
		e := &batch[i]
		if w.opts.Observer != nil {
			w.opts.Observer.Observe(e)
		}
		n := w.opts.RejectSample
		if e.Outcome.Reached() && e.Outcome != Degraded {
			n = w.opts.AdmitSample
		}
		if n < 0 || !w.keep(n) {
			continue
		}
		if len(w.pending) >= w.opts.BufferSize {
			lost++
			continue
		}
		w.pending = append(w.pending, newRow(e, n))
	}
	clear(batch) // drop the strings' references until the next swap
	if lost > 0 {
		w.metrics.dropped.WithLabelValues(dropUnavailable).Add(float64(lost))
		w.log.Warn("request log: rows dropped while Postgres is unreachable", "rows", lost, "buffer", w.opts.BufferSize)
	}

	now := w.now()
	if now.Sub(w.lastMain) >= maintainEvery || w.rows >= w.opts.MaxRows {
		if err := w.maintain(ctx, now); err != nil {
			return err
		}
		w.lastMain = now
	}
	if len(w.pending) == 0 {
		return nil
	}
	if w.full.Load() {
		w.metrics.dropped.WithLabelValues(dropFull).Add(float64(len(w.pending)))
		w.pending = w.pending[:0]
		return nil
	}
	if err := w.write(ctx, now); err != nil {
		return err
	}
	return nil
}

// row is an entry as stored.
type row struct {
	at                       time.Time
	wayIn, outcome, plan     string
	route                    string
	keyID, userID            int64
	address, layer, degraded string
	retryAfter               int32
	status, upstream         int16
	latencyMicros            int64
	weight                   int32
	day                      string // the partition's suffix, YYYYMMDD
}

func newRow(e *Entry, weight int) row {
	r := row{
		at: e.At.UTC(), wayIn: e.WayIn, outcome: e.Outcome.String(), plan: e.Plan, route: e.Route,
		keyID: e.KeyID, userID: e.UserID, layer: e.Layer, degraded: e.StoreDegraded,
		retryAfter: int32(min(ceilSeconds(e.RetryAfter), 1<<31-1)),
		status:     int16(max(min(e.Status, 999), 0)), upstream: int16(max(min(e.UpstreamStatus, 999), 0)),
		latencyMicros: max(e.Latency.Microseconds(), 0), weight: int32(weight),
	}
	if e.KeyID == 0 && e.UserID == 0 {
		r.address = Block(e.Addr)
	}
	r.day = r.at.Format("20060102")
	return r
}

// ceilSeconds rounds d up to whole seconds, never below zero.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

var logColumns = []string{"at", "way_in", "outcome", "plan", "route", "key_id", "user_id", "address",
	"layer", "retry_after", "degraded", "status", "upstream_status", "latency_us", "weight"}

const addDayRows = `
INSERT INTO request_log_days (day, rows) SELECT * FROM unnest($1::date[], $2::bigint[])
ON CONFLICT (day) DO UPDATE SET rows = request_log_days.rows + EXCLUDED.rows`

// write copies the pending rows into their partitions, creating those
// that are missing, and adds them to the day counts, in one transaction.
func (w *Writer) write(ctx context.Context, now time.Time) error {
	oldest := retentionStart(now, w.opts.Retention)
	kept := w.pending[:0]
	days := map[string]int64{}
	var expired int
	for _, r := range w.pending {
		if r.at.Before(oldest) {
			expired++
			continue
		}
		kept = append(kept, r)
		days[r.day]++
	}
	w.pending = kept
	if expired > 0 {
		w.metrics.dropped.WithLabelValues(dropExpired).Add(float64(expired))
	}
	if len(kept) == 0 {
		return nil
	}
	for day := range days {
		if err := w.parts.ensure(ctx, w.pool, day); err != nil {
			return err
		}
	}
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("request log: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	i := 0
	n, err := tx.CopyFrom(ctx, pgx.Identifier{"request_log"}, logColumns, pgx.CopyFromFunc(func() ([]any, error) {
		if i == len(kept) {
			return nil, nil
		}
		r := &kept[i]
		i++
		return []any{r.at, r.wayIn, r.outcome, r.plan, r.route, r.keyID, r.userID, r.address,
			r.layer, r.retryAfter, r.degraded, r.status, r.upstream, r.latencyMicros, r.weight}, nil
	}))
	if err != nil {
		// A partition dropped under us (the cap, another instance) is
		// created again on the next try.
		w.parts.forget()
		return fmt.Errorf("request log: copy: %w", err)
	}
	// Days in order, so that two instances adding to the same days lock
	// their rows in one order (no deadlock).
	names := slices.Sorted(maps.Keys(days))
	dayList := make([]time.Time, 0, len(days))
	counts := make([]int64, 0, len(days))
	for _, d := range names {
		t, _ := time.Parse("20060102", d)
		dayList, counts = append(dayList, t), append(counts, days[d])
	}
	if _, err := tx.Exec(ctx, addDayRows, dayList, counts); err != nil {
		return fmt.Errorf("request log: count rows: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("request log: commit: %w", err)
	}
	w.metrics.written.Add(float64(n))
	w.rows += n
	w.pending = w.pending[:0]
	return nil
}
