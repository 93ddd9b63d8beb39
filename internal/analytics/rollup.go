// Package analytics turns the engine's decisions into what an operator and
// a developer look at: requests by route, status class and consumer over
// time, the protected API's latency percentiles, the top rejected
// consumers, and how close each plan's heaviest users run to their limits.
//
// Rollup counts every decision the request log's writer sees (it is the
// writer's Observer, off the request path) into two rollup tables, per hour
// (traffic_hours: plan, route, status class, a latency histogram) and per
// day and consumer (consumer_days), added to Postgres every flush interval
// with additive upserts so that any number of instances sum exactly. The
// pages read those, the usage history (a consumer's traffic over time) and
// the engine's Peek (headroom); none of them scans the request log except a
// developer's own rows.
package analytics

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/requestlog"
)

// LatencyBounds are the upper bounds of the latency histogram's buckets,
// each half again the one before; a last bucket holds what is slower. A
// percentile read from it is interpolated within its bucket, so it is
// within half a bucket (a third of the value) of the true one.
var LatencyBounds = func() []time.Duration {
	var b []time.Duration
	for d := 500 * time.Microsecond; d <= 5*time.Second; d = d * 3 / 2 {
		b = append(b, d)
	}
	return b
}()

// buckets is the histogram's length: LatencyBounds and the overflow.
var buckets = len(LatencyBounds) + 1

// Status classes as stored: 1 to 5 are HTTP classes.
const (
	ClassUnknown  = 0 // Sluice did not see the answer (forward auth, Envoy)
	ClassRejected = 9 // answered 429 by Sluice
)

// Retention of the rollups.
const (
	HourRetention     = 90 * 24 * time.Hour
	ConsumerRetention = 35 * 24 * time.Hour
)

// Defaults of Options.
const (
	DefaultFlushInterval = 15 * time.Second
	DefaultMaxRows       = 200_000
	DefaultMaxAddresses  = 1000
	pruneEvery           = 10 * time.Minute
)

// Options configure a Rollup; zero fields take the defaults.
type Options struct {
	// FlushInterval is how often the tally is added to Postgres.
	FlushInterval time.Duration
	// MaxRows bounds the rows kept while Postgres is unreachable; the
	// decisions of rows that do not fit are counted as dropped.
	MaxRows int
	// MaxAddresses bounds the anonymous address blocks tallied apart
	// between two flushes; further blocks are counted under "".
	MaxAddresses int
	Logger       *slog.Logger
	// Registerer, when set, receives sluice_analytics_dropped_total.
	Registerer prometheus.Registerer
	// Now is the clock of pruning (time.Now).
	Now func() time.Time
}

type hourKey struct {
	hour        int64 // unix hours
	plan, route string
	class       int16
}

type hourCount struct {
	requests, latencyCount, latencySum int64
	latency                            []int64 // len buckets
}

type dayKey struct {
	day           int64 // unix days
	plan          string
	keyID, userID int64
	address       string
}

type dayCount struct{ requests, rejected int64 }

// Rollup tallies decisions and adds them to the rollup tables. Observe is
// called by one goroutine (the request log's writer); Flush may run on
// another.
type Rollup struct {
	pool *pgxpool.Pool
	opts Options
	log  *slog.Logger
	now  func() time.Time

	mu        sync.Mutex
	hours     map[hourKey]*hourCount
	days      map[dayKey]*dayCount
	addresses int

	flushMu   sync.Mutex
	lastPrune time.Time
	dropped   prometheus.Counter
}

// NewRollup returns a rollup writing to pool.
func NewRollup(pool *pgxpool.Pool, opts Options) *Rollup {
	opts.FlushInterval = cmp.Or(opts.FlushInterval, DefaultFlushInterval)
	opts.MaxRows = cmp.Or(opts.MaxRows, DefaultMaxRows)
	opts.MaxAddresses = cmp.Or(opts.MaxAddresses, DefaultMaxAddresses)
	r := &Rollup{pool: pool, opts: opts, log: opts.Logger, now: opts.Now,
		hours: map[hourKey]*hourCount{}, days: map[dayKey]*dayCount{}}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	if r.now == nil {
		r.now = time.Now
	}
	r.dropped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sluice_analytics_dropped_total",
		Help: "Decisions left out of the analytics rollups because Postgres was unreachable for longer than the pending bound holds.",
	})
	if opts.Registerer != nil {
		opts.Registerer.MustRegister(r.dropped)
	}
	return r
}

// Class is the status class a decision is counted under.
func Class(e *requestlog.Entry) int16 {
	if e.Outcome == requestlog.Rejected {
		return ClassRejected
	}
	return int16(requestlog.StatusClass(e.Status))
}

// bucketOf is the histogram bucket of d.
func bucketOf(d time.Duration) int {
	i, _ := slices.BinarySearch(LatencyBounds, d)
	return i
}

// Observe tallies one decision. It implements requestlog.Observer.
func (r *Rollup) Observe(e *requestlog.Entry) {
	at := e.At.UTC()
	hk := hourKey{hour: at.Unix() / 3600, plan: e.Plan, route: e.Route, class: Class(e)}
	dk := dayKey{day: at.Unix() / 86400, plan: e.Plan, keyID: e.KeyID, userID: e.UserID}
	anonymous := e.KeyID == 0 && e.UserID == 0
	r.mu.Lock()
	defer r.mu.Unlock()
	if anonymous {
		if r.addresses < r.opts.MaxAddresses {
			dk.address = requestlog.Block(e.Addr)
			if _, ok := r.days[dk]; !ok {
				r.addresses++
			}
		}
	}
	h, ok := r.hours[hk]
	if !ok {
		if len(r.hours) >= r.opts.MaxRows {
			r.dropped.Inc()
			return
		}
		h = &hourCount{latency: make([]int64, buckets)}
		r.hours[hk] = h
	}
	h.requests++
	if e.Outcome.Reached() && e.UpstreamStatus != 0 {
		h.latencyCount++
		h.latencySum += e.Latency.Microseconds()
		h.latency[bucketOf(e.Latency)]++
	}
	d, ok := r.days[dk]
	if !ok {
		if len(r.days) >= r.opts.MaxRows {
			r.dropped.Inc()
			return
		}
		d = &dayCount{}
		r.days[dk] = d
	}
	d.requests++
	if e.Outcome == requestlog.Rejected {
		d.rejected++
	}
}

// Run flushes every FlushInterval until ctx ends, then once more with a
// timeout of its own. Failed flushes are logged and retried. It returns nil.
func (r *Rollup) Run(ctx context.Context) error {
	t := time.NewTicker(r.opts.FlushInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			if err := r.Flush(ctx); err != nil && ctx.Err() == nil {
				r.log.Warn("analytics flush failed; the tally is kept and retried", "err", err)
			}
		case <-ctx.Done():
			final, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			err := r.Flush(final)
			cancel()
			if err != nil {
				r.log.Warn("final analytics flush failed", "err", err)
			}
			return nil
		}
	}
}

const upsertHour = `
INSERT INTO traffic_hours (hour, plan, route, class, requests, latency_count, latency_sum, latency)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (hour, plan, route, class) DO UPDATE SET
    requests = traffic_hours.requests + EXCLUDED.requests,
    latency_count = traffic_hours.latency_count + EXCLUDED.latency_count,
    latency_sum = traffic_hours.latency_sum + EXCLUDED.latency_sum,
    latency = (SELECT array_agg(COALESCE(a, 0) + COALESCE(b, 0) ORDER BY i)
               FROM unnest(traffic_hours.latency, EXCLUDED.latency) WITH ORDINALITY AS t(a, b, i))`

const upsertTrafficDay = `
INSERT INTO traffic_days (day, plan, route, class, requests, latency_count, latency_sum, latency)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (day, plan, route, class) DO UPDATE SET
    requests = traffic_days.requests + EXCLUDED.requests,
    latency_count = traffic_days.latency_count + EXCLUDED.latency_count,
    latency_sum = traffic_days.latency_sum + EXCLUDED.latency_sum,
    latency = (SELECT array_agg(COALESCE(a, 0) + COALESCE(b, 0) ORDER BY i)
               FROM unnest(traffic_days.latency, EXCLUDED.latency) WITH ORDINALITY AS t(a, b, i))`

const upsertDays = `
INSERT INTO consumer_days (day, plan, key_id, user_id, address, requests, rejected)
SELECT * FROM unnest($1::date[], $2::text[], $3::bigint[], $4::bigint[], $5::text[], $6::bigint[], $7::bigint[])
ON CONFLICT (day, plan, key_id, user_id, address) DO UPDATE SET
    requests = consumer_days.requests + EXCLUDED.requests,
    rejected = consumer_days.rejected + EXCLUDED.rejected`

// Flush adds everything tallied so far to Postgres in one transaction, and
// prunes rows past their retention every ten minutes. On failure the tally
// is kept for the next flush.
func (r *Rollup) Flush(ctx context.Context) error {
	r.flushMu.Lock()
	defer r.flushMu.Unlock()
	r.mu.Lock()
	hours, days := r.hours, r.days
	r.hours, r.days, r.addresses = map[hourKey]*hourCount{}, map[dayKey]*dayCount{}, 0
	r.mu.Unlock()
	if len(hours) > 0 || len(days) > 0 {
		if err := r.write(ctx, hours, days); err != nil {
			r.restore(hours, days)
			return err
		}
	}
	if now := r.now(); now.Sub(r.lastPrune) >= pruneEvery {
		if err := Prune(ctx, r.pool, now); err != nil {
			return err
		}
		r.lastPrune = now
	}
	return nil
}

// restore adds a batch that could not be written back into the tally.
func (r *Rollup) restore(hours map[hourKey]*hourCount, days map[dayKey]*dayCount) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var lost int64
	for k, v := range hours {
		h, ok := r.hours[k]
		if !ok {
			if len(r.hours) >= r.opts.MaxRows {
				lost += v.requests
				continue
			}
			r.hours[k] = v
			continue
		}
		h.requests += v.requests
		h.latencyCount += v.latencyCount
		h.latencySum += v.latencySum
		for i := range h.latency {
			h.latency[i] += v.latency[i]
		}
	}
	for k, v := range days {
		d, ok := r.days[k]
		if !ok {
			if len(r.days) >= r.opts.MaxRows {
				continue // its requests are counted with the hours
			}
			r.days[k] = v
			continue
		}
		d.requests += v.requests
		d.rejected += v.rejected
	}
	if lost > 0 {
		r.dropped.Add(float64(lost))
	}
}

func (r *Rollup) write(ctx context.Context, hours map[hourKey]*hourCount, days map[dayKey]*dayCount) error {
	// Rows in key order, so two instances flushing the same rows lock them
	// in one order (no deadlock).
	hk := make([]hourKey, 0, len(hours))
	for k := range hours {
		hk = append(hk, k)
	}
	slices.SortFunc(hk, func(a, b hourKey) int {
		return cmp.Or(cmp.Compare(a.hour, b.hour), strings.Compare(a.plan, b.plan), strings.Compare(a.route, b.route), cmp.Compare(a.class, b.class))
	})
	dk := make([]dayKey, 0, len(days))
	for k := range days {
		dk = append(dk, k)
	}
	slices.SortFunc(dk, func(a, b dayKey) int {
		return cmp.Or(cmp.Compare(a.day, b.day), strings.Compare(a.plan, b.plan), cmp.Compare(a.keyID, b.keyID),
			cmp.Compare(a.userID, b.userID), strings.Compare(a.address, b.address))
	})
	// The hours' days, for ranges charted per day; hk's order is theirs.
	type tdKey struct {
		day         int64
		plan, route string
		class       int16
	}
	var tdKeys []tdKey
	tdays := map[tdKey]*hourCount{}
	for _, k := range hk {
		v := hours[k]
		dk := tdKey{k.hour / 24, k.plan, k.route, k.class}
		d, ok := tdays[dk]
		if !ok {
			d = &hourCount{latency: make([]int64, buckets)}
			tdays[dk] = d
			tdKeys = append(tdKeys, dk)
		}
		d.requests += v.requests
		d.latencyCount += v.latencyCount
		d.latencySum += v.latencySum
		for i := range d.latency {
			d.latency[i] += v.latency[i]
		}
	}
	slices.SortFunc(tdKeys, func(a, b tdKey) int {
		return cmp.Or(cmp.Compare(a.day, b.day), strings.Compare(a.plan, b.plan), strings.Compare(a.route, b.route), cmp.Compare(a.class, b.class))
	})
	return pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		for _, k := range hk {
			v := hours[k]
			b.Queue(upsertHour, time.Unix(k.hour*3600, 0).UTC(), k.plan, k.route, k.class, v.requests, v.latencyCount, v.latencySum, v.latency)
		}
		for _, k := range tdKeys {
			v := tdays[k]
			b.Queue(upsertTrafficDay, time.Unix(k.day*86400, 0).UTC(), k.plan, k.route, k.class, v.requests, v.latencyCount, v.latencySum, v.latency)
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return fmt.Errorf("analytics: add hours: %w", err)
		}
		var (
			day                         []time.Time
			plan, addr                  []string
			keyID, userID, req, rejects []int64
		)
		for _, k := range dk {
			v := days[k]
			day = append(day, time.Unix(k.day*86400, 0).UTC())
			plan, addr = append(plan, k.plan), append(addr, k.address)
			keyID, userID = append(keyID, k.keyID), append(userID, k.userID)
			req, rejects = append(req, v.requests), append(rejects, v.rejected)
		}
		if _, err := tx.Exec(ctx, upsertDays, day, plan, keyID, userID, addr, req, rejects); err != nil {
			return fmt.Errorf("analytics: add consumer days: %w", err)
		}
		return nil
	})
}

// Prune deletes rollup rows past their retention, as of now.
func Prune(ctx context.Context, pool *pgxpool.Pool, now time.Time) error {
	if _, err := pool.Exec(ctx, `DELETE FROM traffic_hours WHERE hour < $1`, now.Add(-HourRetention)); err != nil {
		return fmt.Errorf("analytics: prune: %w", err)
	}
	if _, err := pool.Exec(ctx, `DELETE FROM traffic_days WHERE day < $1`, now.Add(-HourRetention).UTC().Truncate(24*time.Hour)); err != nil {
		return fmt.Errorf("analytics: prune: %w", err)
	}
	if _, err := pool.Exec(ctx, `DELETE FROM consumer_days WHERE day < $1`, now.Add(-ConsumerRetention).UTC().Truncate(24*time.Hour)); err != nil {
		return fmt.Errorf("analytics: prune: %w", err)
	}
	return nil
}
