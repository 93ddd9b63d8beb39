// Command benchserver serves the sample API for the end-to-end benchmark
// (scripts/bench-e2e.sh) in one of three modes, so wrk can compare them on
// the same machine:
//
//	-mode bare        the sample API without any rate limiting
//	-mode sluice      the sample API behind httplimit.Middleware deciding with
//	                  a redisstore.Store inside a failover.Store (as the portal runs
//	                  it): two layers, a plan-wide token bucket and a tier on
//	                  GET /api/items/{id}, both so high they never reject
//	-mode memory      the same middleware and layers on a memstore.Store (the
//	                  single-instance default): what the middleware itself costs
//	-mode redis_rate  the sample API behind a plain middleware calling
//	                  go-redis/redis_rate (one layer, same never-rejecting rate)
//
// Every request is anonymous from 127.0.0.1, so all of them share one
// subject: one hot key per layer, the worst case for a shared store.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"syscall"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/failover"
	"github.com/sluicehq/sluice/internal/enforce/httplimit"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/enforce/redisstore"
	"github.com/sluicehq/sluice/internal/sampleapi"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "benchserver:", err)
		os.Exit(1)
	}
}

// neverRejects is a rate so high that no benchmark reaches it: the cost of
// deciding is measured, not the cost of rejecting.
const neverRejects = 1_000_000_000

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("benchserver", flag.ContinueOnError)
	mode := fs.String("mode", "sluice", "bare | sluice | memory | redis_rate")
	addr := fs.String("addr", "127.0.0.1:18080", "listen address")
	redisURL := fs.String("redis", "redis://127.0.0.1:6379/0", "Redis URL (modes sluice and redis_rate)")
	prefix := fs.String("prefix", "bench:", "Redis key prefix")
	withFailover := fs.Bool("failover", false, "mode sluice: guard the Redis store with a failover.Store (local fallback) as the portal does; "+
		"off by default so that every decision is measured on Redis (a timeout under CPU saturation would decide locally)")
	usage := fs.Bool("usage", true, "mode sluice: record per-route usage counters in Redis, as the portal's dashboard needs")
	pipelines := fs.Int("pipelines", 0, "mode sluice: redisstore.Options.Pipelines, the pipelines in flight (0: the store's default)")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the serving period to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stdout, nil))

	var rdb *redis.Client
	if *mode == "sluice" || *mode == "redis_rate" {
		opts, err := redis.ParseURL(*redisURL)
		if err != nil {
			return fmt.Errorf("redis URL: %w", err)
		}
		rdb = redis.NewClient(opts)
		defer rdb.Close()
		if err := rdb.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("redis: %w", err)
		}
	}

	var h http.Handler
	switch *mode {
	case "bare":
		h = sampleapi.New(nil, sampleapi.Options{Logger: log})
	case "sluice":
		redisStore, err := redisstore.New(rdb, redisstore.Options{Prefix: *prefix, DisableUsage: !*usage, Pipelines: *pipelines})
		if err != nil {
			return err
		}
		defer redisStore.Close()
		var store enforce.Store = redisStore
		failMode := enforce.FailClosed
		if *withFailover {
			store = failover.New(redisStore, failover.Options{
				Local: memstore.New(memstore.Options{}), Logger: log,
			})
			failMode = enforce.FailLocal
		}
		mw := httplimit.NewMiddleware(store, benchResolver{}, httplimit.Options{Logger: log, FailureMode: failMode})
		h = sampleapi.New(mw, sampleapi.Options{Logger: log})
	case "memory":
		mw := httplimit.NewMiddleware(memstore.New(memstore.Options{DisableUsage: !*usage}), benchResolver{},
			httplimit.Options{Logger: log})
		h = sampleapi.New(mw, sampleapi.Options{Logger: log})
	case "redis_rate":
		h = redisRateMiddleware(redis_rate.NewLimiter(rdb), *prefix, sampleapi.New(nil, sampleapi.Options{Logger: log}))
	default:
		return fmt.Errorf("unknown -mode %q: want bare, sluice, memory or redis_rate", *mode)
	}

	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}

	l, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       60 * time.Second,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	log.Info("serving", "mode", *mode, "addr", l.Addr().String())
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// benchResolver gives every caller two never-rejecting layers.
type benchResolver struct{}

var benchLimits = []enforce.Limit{
	{Name: "bench-global", Algorithm: enforce.TokenBucket, Limit: neverRejects, Window: time.Second},
	{Name: "bench-items", Algorithm: enforce.FixedWindow, Limit: neverRejects, Window: time.Minute, Route: sampleapi.RouteItem},
}

func (benchResolver) ResolveKey(string) (enforce.Caller, error) {
	return enforce.Caller{}, enforce.ErrInvalidKey
}

func (benchResolver) Anonymous(ip netip.Addr) enforce.Caller {
	return enforce.Caller{Subject: sampleapi.AnonymousSubject(ip), Plan: "bench", Limits: benchLimits}
}

// redisRateMiddleware is the plain middleware one would write around
// go-redis/redis_rate: one Allow per request keyed by client IP, the
// X-RateLimit headers, 429 when rejected.
func redisRateMiddleware(limiter *redis_rate.Limiter, prefix string, next http.Handler) http.Handler {
	limit := redis_rate.PerSecond(neverRejects)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		res, err := limiter.Allow(r.Context(), prefix+"ip:"+host, limit)
		if err != nil {
			http.Error(w, "rate limiter unavailable", http.StatusServiceUnavailable)
			return
		}
		h := w.Header()
		h.Set("X-RateLimit-Limit", strconv.Itoa(limit.Rate))
		h.Set("X-RateLimit-Remaining", strconv.Itoa(res.Remaining))
		h.Set("X-RateLimit-Reset", strconv.FormatInt(time.Now().Add(res.ResetAfter).Unix(), 10))
		if res.Allowed == 0 {
			h.Set("Retry-After", strconv.FormatInt(int64(res.RetryAfter/time.Second)+1, 10))
			http.Error(w, "rate limit exceeded", http.StatusTooManyRequests)
			return
		}
		next.ServeHTTP(w, r)
	})
}
