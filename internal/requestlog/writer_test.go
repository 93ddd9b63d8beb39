package requestlog_test

import (
	"context"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluicehq/sluice/internal/requestlog"
	"github.com/sluicehq/sluice/internal/testenv"
)

// clock is a settable clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

// everyNth keeps the n-th of every n entries it is asked about per n, so
// sampled counts are exact.
func everyNth() func(n int) bool {
	var mu sync.Mutex
	seen := map[int]int{}
	return func(n int) bool {
		mu.Lock()
		defer mu.Unlock()
		seen[n]++
		return seen[n]%n == 0
	}
}

func counter(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				if !hasLabel(m, labels[i], labels[i+1]) {
					continue metrics
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

func scalar(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func entry(at time.Time, o requestlog.Outcome, user, key int64) requestlog.Entry {
	e := requestlog.Entry{At: at, WayIn: requestlog.WayMiddleware, Outcome: o, Plan: "pro", Route: "GET /api/search",
		UserID: user, KeyID: key, Status: 200, UpstreamStatus: 200, Latency: 3 * time.Millisecond}
	if o == requestlog.Rejected {
		e.Status, e.UpstreamStatus, e.Latency = 429, 0, 0
		e.Layer, e.RetryAfter = "pro-search", 1500*time.Millisecond
	}
	if user == 0 {
		e.Addr = netip.MustParseAddr("192.0.2.77")
	}
	return e
}

// observed counts what the writer hands its Observer.
type observed struct{ n atomic.Int64 }

func (o *observed) Observe(*requestlog.Entry) { o.n.Add(1) }

func TestEveryRejectionAndOneAdmissionInNAreStored(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	clk := &clock{t: time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)}
	obs := &observed{}
	w := requestlog.NewWriter(pool, requestlog.Options{Now: clk.Now, AdmitSample: 10, Keep: everyNth(), Observer: obs})
	const admitted, rejected = 1000, 37
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range admitted / 4 {
				w.Log(entry(clk.Now(), requestlog.Admitted, int64(g+1), int64(10+g)))
				if i < rejected && g == 0 {
					w.Log(entry(clk.Now(), requestlog.Rejected, 1, 10))
				}
			}
		}()
	}
	wg.Wait()
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := obs.n.Load(); got != admitted+rejected {
		t.Errorf("observer saw %d entries, want every one of %d", got, admitted+rejected)
	}
	if n := scalar(t, pool, `SELECT count(*) FROM request_log WHERE outcome = 'rejected'`); n != rejected {
		t.Errorf("%d rejections stored, want all %d", n, rejected)
	}
	if n := scalar(t, pool, `SELECT count(*) FROM request_log WHERE outcome = 'admitted'`); n != admitted/10 {
		t.Errorf("%d admissions stored, want one in ten: %d", n, admitted/10)
	}
	if n := scalar(t, pool, `SELECT sum(weight) FROM request_log`); n != admitted+rejected {
		t.Errorf("the weights sum to %d, want the %d decisions", n, admitted+rejected)
	}
	if n := scalar(t, pool, `SELECT rows FROM request_log_days WHERE day = '2026-03-10'`); n != admitted/10+rejected {
		t.Errorf("day count %d, want %d", n, admitted/10+rejected)
	}
	var layer string
	var retry, status, upstream, latency int64
	if err := pool.QueryRow(ctx, `SELECT layer, retry_after, status, upstream_status, latency_us FROM request_log WHERE outcome = 'rejected' LIMIT 1`).
		Scan(&layer, &retry, &status, &upstream, &latency); err != nil {
		t.Fatal(err)
	}
	if layer != "pro-search" || retry != 2 || status != 429 || upstream != 0 || latency != 0 {
		t.Errorf("rejection stored as layer %q, retry %d, status %d, upstream %d, latency %d; want pro-search, 2 (1.5 s rounded up), 429, 0, 0",
			layer, retry, status, upstream, latency)
	}
}

func TestAnonymousCallersAreStoredByAddressBlock(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	at := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	w := requestlog.NewWriter(pool, requestlog.Options{Now: func() time.Time { return at }, AdmitSample: 1})
	w.Log(entry(at, requestlog.Admitted, 0, 0))
	e := entry(at, requestlog.Rejected, 0, 0)
	e.Addr = netip.MustParseAddr("2001:db8:aa:bb::1")
	w.Log(e)
	keyed := entry(at, requestlog.Admitted, 5, 50)
	keyed.Addr = netip.MustParseAddr("198.51.100.4")
	w.Log(keyed)
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT address FROM request_log ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var a string
		_ = rows.Scan(&a)
		got = append(got, a)
	}
	if strings.Join(got, ",") != "192.0.2.0/24,2001:db8:aa::/48," {
		t.Errorf("addresses %q, want the /24, the /48, and none for the keyed caller", got)
	}
}

func TestLogDropsAndCountsWhatTheBufferCannotHold(t *testing.T) {
	pool := testenv.Postgres(t)
	reg := prometheus.NewRegistry()
	at := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	w := requestlog.NewWriter(pool, requestlog.Options{BufferSize: 100, AdmitSample: 1, Registerer: reg, Now: func() time.Time { return at }})
	// No Run: nothing drains the buffer, and Log must still return at once.
	for range 250 {
		w.Log(entry(at, requestlog.Rejected, 1, 10))
	}
	if got := counter(t, reg, "sluice_request_log_dropped_total", "reason", "queue_full"); got != 150 {
		t.Errorf("dropped{queue_full} = %v, want the 150 entries past the buffer of 100", got)
	}
	if err := w.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := scalar(t, pool, `SELECT count(*) FROM request_log`); n != 100 {
		t.Errorf("%d rows stored, want the 100 the buffer held", n)
	}
	if got := counter(t, reg, "sluice_request_log_written_total"); got != 100 {
		t.Errorf("written_total = %v, want 100", got)
	}
}

func TestLogAllocatesNothing(t *testing.T) {
	w := requestlog.NewWriter(nil, requestlog.Options{BufferSize: 1 << 16})
	e := entry(time.Now(), requestlog.Rejected, 1, 10)
	allocs := testing.AllocsPerRun(1000, func() { w.Log(e) })
	if allocs != 0 {
		t.Errorf("Log allocates %v times per call, want 0", allocs)
	}
}

func TestRetentionDropsWholeDays(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	clk := &clock{t: time.Date(2026, 3, 1, 23, 0, 0, 0, time.UTC)}
	w := requestlog.NewWriter(pool, requestlog.Options{Now: clk.Now, AdmitSample: 1, Retention: 2 * 24 * time.Hour, Registerer: reg})
	for day := range 4 {
		clk.Set(time.Date(2026, 3, 1+day, 23, 0, 0, 0, time.UTC))
		for range 5 {
			w.Log(entry(clk.Now(), requestlog.Admitted, 1, 10))
		}
		if err := w.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// On the 4th at 23:00 with 2 days kept, the 2nd (whole days from 2 days
	// back) is the oldest day kept: the 1st goes.
	parts, err := w.Maintain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var days []string
	for _, p := range parts {
		days = append(days, p.Day)
	}
	if strings.Join(days, ",") != "20260302,20260303,20260304,20260305" {
		t.Errorf("partitions %v, want the 2nd to the 4th and tomorrow's", days)
	}
	if n := scalar(t, pool, `SELECT count(*) FROM request_log`); n != 15 {
		t.Errorf("%d rows left, want the 15 of the three days kept", n)
	}
	if n := scalar(t, pool, `SELECT count(*) FROM request_log_days`); n != 3 {
		t.Errorf("%d day counts left, want 3", n)
	}
	if got := counter(t, reg, "sluice_request_log_rows"); got != 15 {
		t.Errorf("sluice_request_log_rows = %v, want 15", got)
	}
	// An entry from a day past the retention is not written.
	w.Log(entry(time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC), requestlog.Admitted, 1, 10))
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := counter(t, reg, "sluice_request_log_dropped_total", "reason", "expired"); got != 1 {
		t.Errorf("dropped{expired} = %v, want 1", got)
	}
	if n := scalar(t, pool, `SELECT count(*) FROM request_log WHERE at < '2026-03-02'`); n != 0 {
		t.Errorf("%d rows from before the retention, want none", n)
	}
}

func TestRowCapDropsTheOldestDaysThenNewRows(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	clk := &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	w := requestlog.NewWriter(pool, requestlog.Options{Now: clk.Now, AdmitSample: 1, MaxRows: 100, Registerer: reg})
	write := func(n int) {
		t.Helper()
		for range n {
			w.Log(entry(clk.Now(), requestlog.Admitted, 1, 10))
		}
		if err := w.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	write(60)
	clk.Set(clk.Now().Add(24 * time.Hour))
	write(60) // 120 rows: over the cap, so the next flush maintains
	write(0)
	if n := scalar(t, pool, `SELECT count(*) FROM request_log`); n != 60 {
		t.Errorf("%d rows after the cap, want the 60 of today (yesterday dropped)", n)
	}
	// Today alone reaches the cap: rows are dropped and counted, not written.
	write(40)
	write(0)
	write(7)
	if n := scalar(t, pool, `SELECT count(*) FROM request_log`); n != 100 {
		t.Errorf("%d rows, want 100: the cap", n)
	}
	if got := counter(t, reg, "sluice_request_log_dropped_total", "reason", "full"); got != 7 {
		t.Errorf("dropped{full} = %v, want 7", got)
	}
	// The next day, today's rows are the oldest and go.
	clk.Set(clk.Now().Add(24 * time.Hour))
	if _, err := w.Maintain(ctx); err != nil {
		t.Fatal(err)
	}
	write(3)
	if n := scalar(t, pool, `SELECT count(*) FROM request_log`); n != 3 {
		t.Errorf("%d rows the day after, want the 3 new ones", n)
	}
}

func TestSizeCapDropsTheOldestDays(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	clk := &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	w := requestlog.NewWriter(pool, requestlog.Options{Now: clk.Now, AdmitSample: 1})
	for day := range 3 {
		clk.Set(time.Date(2026, 3, 1+day, 12, 0, 0, 0, time.UTC))
		for range 10 {
			w.Log(entry(clk.Now(), requestlog.Admitted, 1, 10))
		}
		if err := w.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// A cap of one byte: every day before today is over it, and today
	// alone too, so it is kept and new rows are refused.
	reg := prometheus.NewRegistry()
	small := requestlog.NewWriter(pool, requestlog.Options{Now: clk.Now, AdmitSample: 1, MaxBytes: 1, Registerer: reg})
	parts, err := small.Maintain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) == 0 || parts[0].Day != "20260303" {
		t.Errorf("partitions %+v, want the 3rd first: older days dropped for size", parts)
	}
	if n := scalar(t, pool, `SELECT count(*) FROM request_log`); n != 10 {
		t.Errorf("%d rows left, want the 10 of today", n)
	}
	small.Log(entry(clk.Now(), requestlog.Rejected, 1, 10))
	if err := small.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := counter(t, reg, "sluice_request_log_dropped_total", "reason", "full"); got != 1 {
		t.Errorf("dropped{full} = %v, want 1", got)
	}
}

func TestTwoWritersShareThePartitions(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	at := time.Date(2026, 3, 10, 23, 59, 59, 0, time.UTC)
	var ws []*requestlog.Writer
	for range 2 {
		ws = append(ws, requestlog.NewWriter(pool, requestlog.Options{Now: func() time.Time { return at }, AdmitSample: 1}))
	}
	const per = 300
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				// Across midnight: two days, so both create partitions.
				w.Log(entry(at.Add(time.Duration(i%2)*time.Second), requestlog.Rejected, 1, 10))
				if i%50 == 0 {
					if err := w.Flush(ctx); err != nil {
						t.Error(err)
					}
				}
			}
			if err := w.Flush(ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if n := scalar(t, pool, `SELECT count(*) FROM request_log`); n != 2*per {
		t.Errorf("%d rows, want %d", n, 2*per)
	}
	if n := scalar(t, pool, `SELECT sum(rows) FROM request_log_days`); n != 2*per {
		t.Errorf("day counts sum to %d, want %d", n, 2*per)
	}
}

func TestRunWritesOnStop(t *testing.T) {
	pool := testenv.Postgres(t)
	w := requestlog.NewWriter(pool, requestlog.Options{FlushInterval: time.Hour, AdmitSample: 1})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	for range 5 {
		w.Log(entry(time.Now(), requestlog.Rejected, 1, 10))
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := scalar(t, pool, `SELECT count(*) FROM request_log`); n != 5 {
		t.Errorf("%d rows after the stop, want 5", n)
	}
}
