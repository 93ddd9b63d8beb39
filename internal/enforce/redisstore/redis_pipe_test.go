package redisstore

import (
	"context"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/testenv"
)

// scriptConns returns the CLIENT LIST lines of the connections whose last
// command was EVALSHA.
func scriptConns(t *testing.T, c *redis.Client) []string {
	t.Helper()
	list, err := c.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for line := range strings.Lines(list) {
		if strings.Contains(line, " cmd=evalsha ") {
			lines = append(lines, strings.TrimSpace(line))
		}
	}
	return lines
}

// TestRedisStoreOwnConnection: the pipeline workers' own connections are
// set up as the client's (user, password, database, name), the client's
// options for everything else, and a connection lost between batches costs
// no decision and counts none twice.
func TestRedisStoreOwnConnection(t *testing.T) {
	srv := testenv.StartPrivateRedis(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { admin.Close() })
	ctx := context.Background()
	if err := admin.Do(ctx, "acl", "setuser", "sluice", "on", ">s3cret", "~*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "acl", "setuser", "default", "off").Err(); err != nil {
		t.Fatal(err)
	}
	admin = redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, Username: "sluice", Password: "s3cret", DB: 3})
	t.Cleanup(func() { admin.Close() })
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialerRetries: 1,
		Username: "sluice", Password: "s3cret", DB: 3, ClientName: "sluice-decisions"})
	t.Cleanup(func() { client.Close() })
	limit := enforce.Limit{Name: "fw", Algorithm: enforce.FixedWindow, Limit: 10, Window: time.Hour}
	allow := func(t *testing.T, store *Store, subject string, wantRemaining int64) {
		t.Helper()
		d, err := store.Allow(ctx, enforce.Request{Subject: subject, Limits: []enforce.Limit{limit}})
		if err != nil {
			t.Fatalf("Allow: %v", err)
		}
		if !d.Allowed || d.Layers[0].Remaining != wantRemaining {
			t.Fatalf("Allow: allowed %v, remaining %d, want allowed with %d", d.Allowed, d.Layers[0].Remaining, wantRemaining)
		}
	}

	t.Run("SetUpAsTheClient", func(t *testing.T) {
		store := newTestRedisStore(t, client, Options{Prefix: "own:", Pipelines: 1, DisableUsage: true})
		allow(t, store, "a", 9)
		if n, err := admin.Exists(ctx, "own:{a}").Result(); err != nil || n != 1 {
			t.Fatalf("the subject's state in database 3: %d keys, %v; want 1", n, err)
		}
		conns := scriptConns(t, admin)
		if len(conns) != 1 || !strings.Contains(conns[0], " name=sluice-decisions ") ||
			!strings.Contains(conns[0], " user=sluice ") || !strings.Contains(conns[0], " db=3 ") ||
			!strings.HasSuffix(conns[0], " resp=2") {
			t.Fatalf("connections that ran the script: %q, want one of the worker's own (RESP2, where go-redis speaks RESP3) as the client's user, name and database", conns)
		}
	})

	t.Run("ViaClientLeavesTheCallsToTheClient", func(t *testing.T) {
		if err := admin.ClientKillByFilter(ctx, "type", "normal", "skipme", "yes").Err(); err != nil {
			t.Fatal(err)
		}
		store := newTestRedisStore(t, client, Options{Prefix: "via:", Pipelines: 1, DisableUsage: true, ViaClient: true})
		allow(t, store, "a", 9)
		conns := scriptConns(t, admin)
		if len(conns) != 1 || !strings.HasSuffix(conns[0], " resp=3") {
			t.Fatalf("connections that ran the script: %q, want one of go-redis's (RESP3)", conns)
		}
	})

	t.Run("LostConnectionCostsNoDecision", func(t *testing.T) {
		store := newTestRedisStore(t, client, Options{Prefix: "lost:", Pipelines: 1, DisableUsage: true})
		for i := range 10 {
			if i%3 == 1 {
				// Every connection the client and the worker hold: the
				// worker finds out when it next writes or reads.
				if err := admin.ClientKillByFilter(ctx, "type", "normal", "skipme", "yes").Err(); err != nil {
					t.Fatal(err)
				}
			}
			allow(t, store, "a", int64(9-i))
		}
	})
}

// TestRedisStoreOwnConnectionFollowsFailover: a worker whose Redis turns
// into a replica (READONLY) dials again through the client's Dialer, which
// finds the new master as a Sentinel client's does, instead of leaving
// every later batch to go-redis.
func TestRedisStoreOwnConnectionFollowsFailover(t *testing.T) {
	old, next := testenv.StartPrivateRedis(t), testenv.StartPrivateRedis(t)
	var master atomic.Pointer[string]
	master.Store(&old.Addr)
	client := redis.NewClient(&redis.Options{Addr: old.Addr, MaxRetries: 2, DialerRetries: 1,
		Dialer: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, *master.Load())
		}})
	t.Cleanup(func() { client.Close() })
	store := newTestRedisStore(t, client, Options{Prefix: "failover:", Pipelines: 1, DisableUsage: true})
	ctx := context.Background()
	req := enforce.Request{Subject: "a", Limits: []enforce.Limit{{Name: "fw", Algorithm: enforce.FixedWindow, Limit: 10, Window: time.Hour}}}
	if _, err := store.Allow(ctx, req); err != nil {
		t.Fatalf("Allow on the first master: %v", err)
	}
	admin := redis.NewClient(&redis.Options{Addr: old.Addr, MaxRetries: -1})
	t.Cleanup(func() { admin.Close() })
	host, port, _ := net.SplitHostPort(next.Addr)
	if err := admin.Do(ctx, "replicaof", host, port).Err(); err != nil {
		t.Fatal(err)
	}
	onNext := redis.NewClient(&redis.Options{Addr: next.Addr, MaxRetries: -1})
	t.Cleanup(func() { onNext.Close() })
	if err := onNext.ScriptLoad(ctx, decideScript).Err(); err != nil {
		t.Fatal(err) // as a replica promoted by Sentinel would have it
	}
	master.Store(&next.Addr)
	for range 3 {
		if _, err := store.Allow(ctx, req); err != nil {
			t.Fatalf("Allow after the failover: %v", err)
		}
	}
	conns := scriptConns(t, onNext)
	if len(conns) != 2 || !strings.HasSuffix(conns[0], " resp=2") && !strings.HasSuffix(conns[1], " resp=2") {
		t.Fatalf("connections that ran the script on the new master: %q, want go-redis's (the batch that met READONLY) and the worker's own (RESP2)", conns)
	}
}

// TestRedisStoreOwnConnectionOverTLS: the workers' connections speak TLS
// when the client does, through the Dialer go-redis made from TLSConfig.
func TestRedisStoreOwnConnectionOverTLS(t *testing.T) {
	srv := testenv.StartTLSRedis(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialerRetries: 1, TLSConfig: srv.ClientTLS()})
	t.Cleanup(func() { client.Close() })
	ctx := context.Background()
	store := newTestRedisStore(t, client, Options{Prefix: "tls:", Pipelines: 1, DisableUsage: true})
	req := enforce.Request{Subject: "a", Limits: []enforce.Limit{{Name: "fw", Algorithm: enforce.FixedWindow, Limit: 10, Window: time.Hour}}}
	for i := range 3 {
		d, err := store.Allow(ctx, req)
		if err != nil || !d.Allowed || d.Layers[0].Remaining != int64(9-i) {
			t.Fatalf("Allow %d over TLS: %+v, %v; want allowed with %d remaining", i, d, err, 9-i)
		}
	}
	if conns := scriptConns(t, client); len(conns) != 1 || !strings.HasSuffix(conns[0], " resp=2") {
		t.Fatalf("connections that ran the script: %q, want the worker's own (RESP2)", conns)
	}
}

// BenchmarkRedisOwnConnection runs the store with its workers' own
// connections and the same store through go-redis (ViaClient, the path
// every batch took before pipeConn) in alternating rounds of 20,000
// decisions, 64 callers on 1,000 subjects, one layer, usage on, and reports
// the medians of each: decisions/s, p50, p99, and this process's CPU
// (user and system, from getrusage) per decision, which the load of other
// processes moves much less than decisions/s. Run it with -benchtime 7x.
//
// 2026-12-03, 2-core AMD EPYC shared with other sessions, Redis 7.0.15 on
// loopback, four runs (load average 4.2, then 7.8, 6.6, 6.4): own
// connections 0.88, 0.81, 0.82, 0.76x the CPU per decision through go-redis
// (7.61 against 8.27 µs in the first), 1.06, 1.24, 1.16, 1.20x the
// decisions/s, p50 758/806, 688/884, 778/801, 722/868 µs; p99 went with
// the load (3.5/4.1, 1.9/3.2, 4.3/5.4, 6.2/4.0 ms).
func BenchmarkRedisOwnConnection(b *testing.B) {
	const per = 20_000
	client, prefix := benchRedisClient(b)
	own := newTestRedisStore(b, client, Options{Prefix: prefix + "o:", Timeout: time.Second})
	via := newTestRedisStore(b, client, Options{Prefix: prefix + "v:", Timeout: time.Second, ViaClient: true})
	one := []enforce.Limit{benchLimit}
	type figures struct{ rate, p50, p99, cpu []float64 }
	var fOwn, fVia figures
	round := func(s *Store, f *figures) {
		before := processCPU(b)
		r, lat, err := measureCallers(per, func(ctx context.Context, i int) error {
			_, err := s.Allow(ctx, enforce.Request{Subject: "key:" + strconv.Itoa(i%1000), Route: "GET /x", Limits: one})
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		f.cpu = append(f.cpu, float64((processCPU(b)-before).Nanoseconds())/1e3/per)
		f.rate, f.p50, f.p99 = append(f.rate, r), append(f.p50, percentileMicros(lat, .5)), append(f.p99, percentileMicros(lat, .99))
	}
	b.ResetTimer()
	for i := range max(b.N, 5) {
		if i%2 == 0 {
			round(own, &fOwn)
			round(via, &fVia)
		} else {
			round(via, &fVia)
			round(own, &fOwn)
		}
	}
	b.StopTimer()
	median := func(v []float64) float64 { v = slices.Clone(v); slices.Sort(v); return v[len(v)/2] }
	ratio := func(a, b []float64) float64 {
		r := make([]float64, len(a))
		for i := range a {
			r[i] = a[i] / b[i]
		}
		return median(r)
	}
	b.ReportMetric(median(fOwn.rate), "own-dec/s")
	b.ReportMetric(median(fVia.rate), "via-dec/s")
	b.ReportMetric(median(fOwn.p50), "own-p50-µs")
	b.ReportMetric(median(fVia.p50), "via-p50-µs")
	b.ReportMetric(median(fOwn.p99), "own-p99-µs")
	b.ReportMetric(median(fVia.p99), "via-p99-µs")
	b.ReportMetric(median(fOwn.cpu), "own-cpu-µs/dec")
	b.ReportMetric(median(fVia.cpu), "via-cpu-µs/dec")
	b.ReportMetric(ratio(fOwn.cpu, fVia.cpu), "own/via-cpu")
	b.ReportMetric(ratio(fOwn.rate, fVia.rate), "own/via-dec/s")
	b.ReportMetric(0, "ns/op")
}

// processCPU is the user and system CPU time this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
