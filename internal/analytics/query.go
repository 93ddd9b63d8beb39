package analytics

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Range is a span of time [From, To) cut into buckets of Bucket (an hour
// or a day); From is on a bucket's start.
type Range struct {
	From, To time.Time
	Bucket   time.Duration
}

// Buckets is how many buckets r has.
func (r Range) Buckets() int {
	if r.Bucket <= 0 || !r.From.Before(r.To) {
		return 0
	}
	return int((r.To.Sub(r.From) + r.Bucket - 1) / r.Bucket)
}

// Days is the UTC days r touches, [first, last+1).
func (r Range) Days() (time.Time, time.Time) {
	day := 24 * time.Hour
	return r.From.UTC().Truncate(day), r.To.Add(-time.Nanosecond).UTC().Truncate(day).Add(day)
}

// index is the bucket t falls in, -1 outside r.
func (r Range) index(t time.Time) int {
	if t.Before(r.From) || !t.Before(r.To) {
		return -1
	}
	return int(t.Sub(r.From) / r.Bucket)
}

// Series is one line or band of a chart: a count per bucket.
type Series struct {
	Label string
	// Value is what a filter takes to select this series ("" for "other").
	Value  string
	Points []int64
	Total  int64
}

// Stacked is a chart of several series over one range, busiest first, the
// last one "other" when there were more than the chart shows.
type Stacked struct {
	Range  Range
	Series []Series
}

// Totals is each bucket's sum over the series.
func (s Stacked) Totals() []int64 {
	out := make([]int64, s.Range.Buckets())
	for _, se := range s.Series {
		for i, v := range se.Points {
			out[i] += v
		}
	}
	return out
}

// stack builds a chart from rows of (bucket start, label, count), keeping
// the top labels by total and summing the rest into "other".
func stack(rg Range, rows []labelled, top int, label func(string) string) Stacked {
	byLabel := map[string]*Series{}
	for _, r := range rows {
		i := rg.index(r.at)
		if i < 0 {
			continue
		}
		s, ok := byLabel[r.value]
		if !ok {
			s = &Series{Label: label(r.value), Value: r.value, Points: make([]int64, rg.Buckets())}
			byLabel[r.value] = s
		}
		s.Points[i] += r.n
		s.Total += r.n
	}
	all := make([]Series, 0, len(byLabel))
	for _, s := range byLabel {
		all = append(all, *s)
	}
	slices.SortFunc(all, func(a, b Series) int { return cmp.Or(cmp.Compare(b.Total, a.Total), cmp.Compare(a.Label, b.Label)) })
	if len(all) > top {
		other := Series{Label: "other", Points: make([]int64, rg.Buckets())}
		for _, s := range all[top:] {
			for i, v := range s.Points {
				other.Points[i] += v
			}
			other.Total += s.Total
		}
		all = append(all[:top], other)
	}
	return Stacked{Range: rg, Series: all}
}

type labelled struct {
	at    time.Time
	value string
	n     int64
}

// Reader reads the rollups, the usage history and a developer's own log.
type Reader struct{ pool *pgxpool.Pool }

// NewReader returns a reader over pool.
func NewReader(pool *pgxpool.Pool) *Reader { return &Reader{pool: pool} }

func (q *Reader) labelled(ctx context.Context, sql string, args ...any) ([]labelled, error) {
	rows, err := q.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("analytics: %w", err)
	}
	var out []labelled
	var l labelled
	_, err = pgx.ForEachRow(rows, []any{&l.at, &l.value, &l.n}, func() error { out = append(out, l); return nil })
	if err != nil {
		return nil, fmt.Errorf("analytics: %w", err)
	}
	return out, nil
}

// traffic is the rollup a range reads (per day when its buckets are whole
// days, else per hour) and its time column, as a timestamptz.
func (r Range) traffic() (table, at string) {
	if r.Bucket%(24*time.Hour) == 0 && r.From.Equal(r.From.UTC().Truncate(24*time.Hour)) {
		return "traffic_days", "day::timestamptz"
	}
	return "traffic_hours", "hour"
}

// Traffic is the requests of rg (every caller of plan, "" for every plan)
// per route, the top routes apart, and per status class: the API's 2xx to
// 5xx, Sluice's rejections, and those whose answer Sluice did not see. Both
// come from one scan of the rollup.
func (q *Reader) Traffic(ctx context.Context, rg Range, plan string, top int) (byRoute, byClass Stacked, err error) {
	table, at := rg.traffic()
	rows, err := q.pool.Query(ctx, fmt.Sprintf(`
SELECT date_bin($3, %[2]s, $1), route, class::text, sum(requests)::bigint FROM %[1]s
WHERE %[2]s >= $1 AND %[2]s < $2 AND ($4 = '' OR plan = $4)
GROUP BY GROUPING SETS ((1, route), (1, class))`, table, at), rg.From, rg.To, rg.Bucket, plan)
	if err != nil {
		return Stacked{}, Stacked{}, fmt.Errorf("analytics: traffic: %w", err)
	}
	var (
		routes, classes []labelled
		t               time.Time
		route, class    *string
		n               int64
	)
	_, err = pgx.ForEachRow(rows, []any{&t, &route, &class, &n}, func() error {
		switch {
		case route != nil:
			routes = append(routes, labelled{t, *route, n})
		case class != nil:
			classes = append(classes, labelled{t, *class, n})
		}
		return nil
	})
	if err != nil {
		return Stacked{}, Stacked{}, fmt.Errorf("analytics: traffic: %w", err)
	}
	return stack(rg, routes, top, RouteLabel), stack(rg, classes, 10, ClassLabel), nil
}

// RouteLabel shows a route, "(no route)" for requests that matched none.
func RouteLabel(route string) string { return cmp.Or(route, "(no route)") }

// ClassLabel names a status class as stored.
func ClassLabel(class string) string {
	switch class {
	case strconv.Itoa(ClassUnknown):
		return "not seen"
	case strconv.Itoa(ClassRejected):
		return "429 by Sluice"
	}
	return class + "xx"
}

// Percentiles are latency percentiles of some answers of the API.
type Percentiles struct {
	P50, P95, P99 time.Duration
	// Count is how many answers they are read from.
	Count int64
}

// percentiles reads p50, p95 and p99 from a histogram over LatencyBounds,
// interpolating within a bucket.
func percentiles(h []int64) Percentiles {
	var n int64
	for _, c := range h {
		n += c
	}
	p := Percentiles{Count: n}
	if n == 0 {
		return p
	}
	at := func(q float64) time.Duration {
		rank := q * float64(n)
		var cum float64
		for i, c := range h {
			if c == 0 {
				continue
			}
			if cum+float64(c) >= rank {
				lo := time.Duration(0)
				if i > 0 {
					lo = LatencyBounds[i-1]
				}
				hi := lo * 3 / 2
				if i < len(LatencyBounds) {
					hi = LatencyBounds[i]
				}
				return lo + time.Duration(float64(hi-lo)*(rank-cum)/float64(c))
			}
			cum += float64(c)
		}
		return LatencyBounds[len(LatencyBounds)-1]
	}
	p.P50, p.P95, p.P99 = at(0.50), at(0.95), at(0.99)
	return p
}

// Latency is the API's latency percentiles per bucket of rg and over all
// of it, for plan and route ("" for all). The histograms are summed here:
// reading the rows' arrays and adding them up costs a tenth of unnesting
// them in SQL (22 ms against 261 ms for a week of hours in
// scripts/bench-analytics.sh's data).
func (q *Reader) Latency(ctx context.Context, rg Range, plan, route string) ([]Percentiles, Percentiles, error) {
	table, col := rg.traffic()
	rows, err := q.pool.Query(ctx, fmt.Sprintf(`
SELECT date_bin($3, %[2]s, $1), latency FROM %[1]s
WHERE %[2]s >= $1 AND %[2]s < $2 AND latency_count > 0 AND ($4 = '' OR plan = $4) AND ($5 = '' OR route = $5)`, table, col),
		rg.From, rg.To, rg.Bucket, plan, route)
	if err != nil {
		return nil, Percentiles{}, fmt.Errorf("analytics: latency: %w", err)
	}
	hists := make([][]int64, rg.Buckets())
	all := make([]int64, buckets)
	var (
		at time.Time
		h  []int64
	)
	_, err = pgx.ForEachRow(rows, []any{&at, &h}, func() error {
		b := rg.index(at)
		if b < 0 {
			return nil
		}
		if hists[b] == nil {
			hists[b] = make([]int64, buckets)
		}
		for i, n := range h[:min(len(h), buckets)] {
			hists[b][i] += n
			all[i] += n
		}
		return nil
	})
	if err != nil {
		return nil, Percentiles{}, fmt.Errorf("analytics: latency: %w", err)
	}
	out := make([]Percentiles, len(hists))
	for b, h := range hists {
		out[b] = percentiles(h)
	}
	return out, percentiles(all), nil
}

// ConsumerSeries is each key's requests per bucket of rg, from the usage
// history, labelled as in cs.
func (q *Reader) ConsumerSeries(ctx context.Context, rg Range, cs []Consumer) ([]Series, error) {
	var ids []int64
	for _, c := range cs {
		if c.KeyID != 0 {
			ids = append(ids, c.KeyID)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := q.labelled(ctx, `
SELECT date_bin($3, hour, $1), key_id::text, sum(admitted + rejected)::bigint FROM usage_hours
WHERE key_id = ANY($4) AND hour >= $1 AND hour < $2 GROUP BY 1, 2`, rg.From, rg.To, rg.Bucket, ids)
	if err != nil {
		return nil, err
	}
	byKey := map[string]*Series{}
	var out []Series
	for _, c := range cs {
		if c.KeyID != 0 {
			out = append(out, Series{Label: c.Label, Value: strconv.FormatInt(c.KeyID, 10), Points: make([]int64, rg.Buckets())})
		}
	}
	for i := range out {
		byKey[out[i].Value] = &out[i]
	}
	for _, r := range rows {
		if s, i := byKey[r.value], rg.index(r.at); s != nil && i >= 0 {
			s.Points[i] += r.n
			s.Total += r.n
		}
	}
	return out, nil
}

// DeveloperByRoute is developer userID's requests of rg per route, from
// the usage history (admitted and rejected).
func (q *Reader) DeveloperByRoute(ctx context.Context, rg Range, userID int64, top int) (Stacked, error) {
	rows, err := q.labelled(ctx, `
SELECT date_bin($3, hour, $1), route, sum(admitted + rejected)::bigint FROM usage_hours
WHERE user_id = $4 AND hour >= $1 AND hour < $2 GROUP BY 1, 2`, rg.From, rg.To, rg.Bucket, userID)
	if err != nil {
		return Stacked{}, err
	}
	return stack(rg, rows, top, RouteLabel), nil
}

// DeveloperByClass is developer userID's logged requests of rg per status
// class, from the request log: each row counts for the decisions it stands
// for (its weight), so sampled admissions are estimated.
func (q *Reader) DeveloperByClass(ctx context.Context, rg Range, userID int64) (Stacked, error) {
	rows, err := q.labelled(ctx, `
SELECT date_bin($3, at, $1), (CASE WHEN outcome = 'rejected' THEN 9 ELSE status / 100 END)::text, sum(weight)::bigint
FROM request_log WHERE user_id = $4 AND at >= $1 AND at < $2 GROUP BY 1, 2`, rg.From, rg.To, rg.Bucket, userID)
	if err != nil {
		return Stacked{}, err
	}
	return stack(rg, rows, 10, ClassLabel), nil
}

// DeveloperLatency is the API's latency percentiles over developer
// userID's logged answers of rg (the request log's sample).
func (q *Reader) DeveloperLatency(ctx context.Context, rg Range, userID int64) (Percentiles, error) {
	var p Percentiles
	var p50, p95, p99 *float64
	err := q.pool.QueryRow(ctx, `
SELECT count(*), percentile_cont(0.5) WITHIN GROUP (ORDER BY latency_us), percentile_cont(0.95) WITHIN GROUP (ORDER BY latency_us),
       percentile_cont(0.99) WITHIN GROUP (ORDER BY latency_us)
FROM request_log WHERE user_id = $1 AND at >= $2 AND at < $3 AND upstream_status <> 0`, userID, rg.From, rg.To).Scan(&p.Count, &p50, &p95, &p99)
	if err != nil {
		return p, fmt.Errorf("analytics: developer latency: %w", err)
	}
	us := func(f *float64) time.Duration {
		if f == nil {
			return 0
		}
		return time.Duration(*f * float64(time.Microsecond))
	}
	p.P50, p.P95, p.P99 = us(p50), us(p95), us(p99)
	return p, nil
}
