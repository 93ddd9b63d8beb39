package analytics_test

import (
	"context"
	"math"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/analytics"
	"github.com/sluicehq/sluice/internal/requestlog"
	"github.com/sluicehq/sluice/internal/testenv"
)

var day0 = time.Date(2026, 3, 10, 0, 0, 0, 0, time.UTC)

func scalar(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// decision is an entry of the given outcome and upstream status at at.
func decision(at time.Time, o requestlog.Outcome, status int, user, key int64, route string, latency time.Duration) requestlog.Entry {
	e := requestlog.Entry{At: at, WayIn: requestlog.WayMiddleware, Outcome: o, Plan: "pro", Route: route,
		UserID: user, KeyID: key, Status: status}
	if o.Reached() {
		e.UpstreamStatus, e.Latency = status, latency
	}
	if user == 0 {
		e.Addr = netip.MustParseAddr("198.51.100.20")
		e.Plan = "anon"
	}
	return e
}

func TestTwoInstancesRollUpEveryDecisionExactly(t *testing.T) {
	// Two instances, each a request log writer keeping one admission in
	// 100 with a rollup as its observer: the rollups count every decision,
	// sampled or not, and sum exactly across instances.
	pool := testenv.Postgres(t)
	ctx := context.Background()
	at := day0.Add(9*time.Hour + 59*time.Minute)
	type instance struct {
		w *requestlog.Writer
		r *analytics.Rollup
	}
	var insts []instance
	for range 2 {
		r := analytics.NewRollup(pool, analytics.Options{Now: func() time.Time { return at }})
		w := requestlog.NewWriter(pool, requestlog.Options{Observer: r, Now: func() time.Time { return at }})
		insts = append(insts, instance{w, r})
	}
	const per = 500
	var wg sync.WaitGroup
	for _, in := range insts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				ts := at.Add(time.Duration(i%2) * 2 * time.Minute) // across 10:00: two hours
				switch i % 5 {
				case 0:
					in.w.Log(decision(ts, requestlog.Rejected, 429, 1, 10, "GET /a", 0))
				case 1:
					in.w.Log(decision(ts, requestlog.Admitted, 503, 1, 11, "GET /b", 40*time.Millisecond))
				case 2:
					in.w.Log(decision(ts, requestlog.Admitted, 0, 0, 0, "GET /a", 0)) // forward auth: answer unseen
				default:
					in.w.Log(decision(ts, requestlog.Admitted, 200, 2, 20, "GET /a", 5*time.Millisecond))
				}
				if i%100 == 99 {
					if err := in.w.Flush(ctx); err != nil {
						t.Error(err)
					}
					if err := in.r.Flush(ctx); err != nil {
						t.Error(err)
					}
				}
			}
		}()
	}
	wg.Wait()
	for _, in := range insts {
		if err := in.w.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if err := in.r.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	total := int64(2 * per)
	if n := scalar(t, pool, `SELECT sum(requests) FROM traffic_hours`); n != total {
		t.Errorf("traffic_hours holds %d requests, want every one of %d", n, total)
	}
	if n := scalar(t, pool, `SELECT count(DISTINCT hour) FROM traffic_hours`); n != 2 {
		t.Errorf("%d hours, want 2", n)
	}
	for _, tt := range []struct {
		class int
		want  int64
	}{{analytics.ClassRejected, total / 5}, {5, total / 5}, {analytics.ClassUnknown, total / 5}, {2, 2 * total / 5}} {
		if n := scalar(t, pool, `SELECT COALESCE(sum(requests), 0) FROM traffic_hours WHERE class = $1`, tt.class); n != tt.want {
			t.Errorf("class %d: %d requests, want %d", tt.class, n, tt.want)
		}
	}
	if n := scalar(t, pool, `SELECT sum(latency_count) FROM traffic_hours`); n != 3*total/5 {
		t.Errorf("%d latencies, want the %d answers Sluice saw", n, 3*total/5)
	}
	if n := scalar(t, pool, `SELECT sum(x) FROM traffic_hours, unnest(latency) x`); n != 3*total/5 {
		t.Errorf("the histograms hold %d answers, want %d", n, 3*total/5)
	}
	for _, tt := range []struct {
		key           int64
		req, rejected int64
	}{{10, total / 5, total / 5}, {11, total / 5, 0}, {20, 2 * total / 5, 0}} {
		var req, rej int64
		if err := pool.QueryRow(ctx, `SELECT sum(requests), sum(rejected) FROM consumer_days WHERE key_id = $1`, tt.key).Scan(&req, &rej); err != nil {
			t.Fatal(err)
		}
		if req != tt.req || rej != tt.rejected {
			t.Errorf("key %d: %d requests, %d rejected; want %d and %d", tt.key, req, rej, tt.req, tt.rejected)
		}
	}
	if n := scalar(t, pool, `SELECT sum(requests) FROM consumer_days WHERE key_id = 0 AND address = '198.51.100.0/24'`); n != total/5 {
		t.Errorf("the anonymous block: %d requests, want %d", n, total/5)
	}
	// The request log holds the sample: every rejection, some admissions.
	if n := scalar(t, pool, `SELECT count(*) FROM request_log WHERE outcome = 'rejected'`); n != total/5 {
		t.Errorf("%d rejections logged, want all %d", n, total/5)
	}
}

func TestLatencyPercentilesAreWithinABucket(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	r := analytics.NewRollup(pool, analytics.Options{Now: func() time.Time { return day0 }})
	// 1000 answers of 1 ms, 2 ms, ..., 1000 ms on one route, and 10 slow
	// ones of 4 s on another.
	var all []time.Duration
	for i := 1; i <= 1000; i++ {
		d := time.Duration(i) * time.Millisecond
		all = append(all, d)
		e := decision(day0.Add(time.Duration(i)*time.Second), requestlog.Admitted, 200, 1, 10, "GET /a", d)
		r.Observe(&e)
	}
	for range 10 {
		e := decision(day0.Add(2*time.Hour), requestlog.Admitted, 200, 1, 10, "GET /slow", 4*time.Second)
		r.Observe(&e)
		all = append(all, 4*time.Second)
	}
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	q := analytics.NewReader(pool)
	rg := analytics.Range{From: day0, To: day0.Add(24 * time.Hour), Bucket: time.Hour}
	exact := func(ds []time.Duration, p float64) time.Duration {
		s := slices.Clone(ds)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		return s[int(math.Ceil(p*float64(len(s))))-1]
	}
	within := func(name string, got, want time.Duration) {
		t.Helper()
		// A bucket's upper bound is 1.5 times its lower: an interpolated
		// value is off by less than a third of the true one.
		if diff := math.Abs(float64(got - want)); diff > float64(want)/3 {
			t.Errorf("%s = %v, want %v within a third", name, got, want)
		}
	}
	points, overall, err := q.Latency(ctx, rg, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if overall.Count != 1010 {
		t.Errorf("count %d, want 1010", overall.Count)
	}
	within("p50", overall.P50, exact(all, 0.5))
	within("p95", overall.P95, exact(all, 0.95))
	within("p99", overall.P99, exact(all, 0.99))
	if len(points) != 24 || points[2].Count != 10 || points[5].Count != 0 {
		t.Errorf("per hour: %d buckets, hour 2 %d answers, hour 5 %d; want 24, 10, 0", len(points), points[2].Count, points[5].Count)
	}
	within("hour 2 p50", points[2].P50, 4*time.Second)
	_, route, err := q.Latency(ctx, rg, "", "GET /a")
	if err != nil {
		t.Fatal(err)
	}
	if route.Count != 1000 {
		t.Errorf("route count %d, want 1000", route.Count)
	}
	within("route p99", route.P99, exact(all[:1000], 0.99))
}

func TestChartsStackTheTopAndSumTheRest(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	r := analytics.NewRollup(pool, analytics.Options{Now: func() time.Time { return day0 }})
	// Route /r<i> gets 10-i requests in hour i (i from 0 to 6).
	for i := range 7 {
		for range 10 - i {
			e := decision(day0.Add(time.Duration(i)*time.Hour), requestlog.Admitted, 200, 1, 10, "GET /r"+string(rune('0'+i)), time.Millisecond)
			r.Observe(&e)
		}
	}
	e := decision(day0, requestlog.Rejected, 429, 1, 10, "GET /r0", 0)
	r.Observe(&e)
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	q := analytics.NewReader(pool)
	rg := analytics.Range{From: day0, To: day0.Add(24 * time.Hour), Bucket: time.Hour}
	s, _, err := q.Traffic(ctx, rg, "", 3)
	if err != nil {
		t.Fatal(err)
	}
	var labels []string
	for _, se := range s.Series {
		labels = append(labels, se.Label)
	}
	if strings.Join(labels, ",") != "GET /r0,GET /r1,GET /r2,other" {
		t.Fatalf("series %v, want the three busiest routes and other", labels)
	}
	if s.Series[0].Total != 11 || s.Series[3].Total != 7+6+5+4 || s.Series[3].Points[6] != 4 {
		t.Errorf("totals %d and %d, other at hour 6 %d; want 11, 22, 4", s.Series[0].Total, s.Series[3].Total, s.Series[3].Points[6])
	}
	if tot := s.Totals(); len(tot) != 24 || tot[0] != 11 || tot[3] != 7 {
		t.Errorf("totals per hour %v", tot)
	}
	_, c, err := q.Traffic(ctx, rg, "pro", 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Series) != 2 || c.Series[0].Label != "2xx" || c.Series[0].Total != 49 || c.Series[1].Label != "429 by Sluice" || c.Series[1].Total != 1 {
		t.Errorf("classes %+v, want 49 of 2xx and 1 rejected", c.Series)
	}
	daily := analytics.Range{From: day0, To: day0.Add(48 * time.Hour), Bucket: 24 * time.Hour}
	if s, _, err := q.Traffic(ctx, daily, "", 10); err != nil || len(s.Series[0].Points) != 2 || s.Series[0].Points[0] != 11 {
		t.Errorf("by day: %+v, %v", s, err)
	}
	if s, _, err := q.Traffic(ctx, rg, "anon", 10); err != nil || len(s.Series) != 0 {
		t.Errorf("another plan: %+v, %v; want nothing", s.Series, err)
	}
}
