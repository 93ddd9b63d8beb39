package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/optokens"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/sampleapi"
	"github.com/sluicehq/sluice/internal/snapshot"
	"github.com/sluicehq/sluice/internal/users"
	"github.com/sluicehq/sluice/web"
	"github.com/sluicehq/sluice/web/adminapi"
)

// serverDeps is what the HTTP surfaces are built from.
type serverDeps struct {
	cfg    Config
	logger *slog.Logger
	pool   *pgxpool.Pool
	// redis is nil when REDIS_URL is unset (in-memory counters).
	redis redis.UniversalClient
}

// protectedRoutes are the ServeMux patterns of the sample API that plan
// tiers may name; the plans service refuses a tier on any other route.
var protectedRoutes = []string{
	sampleapi.RouteSearch, sampleapi.RouteItem, sampleapi.RouteCreateReport, sampleapi.RouteJob,
}

// limitStore is a counter store the UI can also read usage series from.
type limitStore interface {
	enforce.Store
	web.UsageReader
}

// newServer builds the portal's whole HTTP surface on one root ServeMux:
// the one place where every part of Sluice is mounted. It returns the handler
// and a function that stops what the surfaces started (the snapshot's
// listener, the last-used flusher, the Redis batcher), to call after the HTTP
// server has shut down.
func newServer(ctx context.Context, d serverDeps) (http.Handler, func(), error) {
	metrics := prometheus.NewRegistry()
	metrics.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)

	// Counters: Redis when configured, behind the failure-mode policy;
	// otherwise the memory store (one instance).
	var (
		counters  limitStore
		limiter   enforce.Store
		dashboard enforce.Store // nil: the limiter
		closers   []func()
	)
	if d.redis != nil {
		rs, err := enforce.NewRedisStore(d.redis, enforce.RedisOptions{
			Prefix: d.cfg.RedisPrefix, Timeout: d.cfg.RedisTimeout, Registerer: metrics,
		})
		if err != nil {
			return nil, nil, fmt.Errorf("REDIS_URL: load the rate-limit script: %w", err)
		}
		closers = append(closers, func() { _ = rs.Close() })
		fo := enforce.FailoverOptions{
			Timeout: d.cfg.RedisTimeout, Instances: d.cfg.Instances, Logger: d.logger, Registerer: metrics,
		}
		if d.cfg.RedisFailureMode == enforce.FailLocal {
			fo.Local = enforce.NewMemoryStore(enforce.MemoryOptions{MaxSubjects: d.cfg.MemoryMaxSubjects})
		}
		counters, limiter = rs, enforce.NewFailoverStore(rs, fo)

		// The dashboards read through a client and a store of their own.
		dc, err := dashboardRedis(d.cfg.RedisURL, d.cfg.DashboardRedisPool, d.cfg.DashboardRedisTimeout)
		if err != nil {
			return nil, nil, fmt.Errorf("REDIS_URL: %w", err)
		}
		ds, err := enforce.NewRedisStore(dc, enforce.RedisOptions{
			Prefix: d.cfg.RedisPrefix, Timeout: d.cfg.DashboardRedisTimeout, DisableUsage: true,
		})
		if err != nil {
			_ = dc.Close()
			return nil, nil, fmt.Errorf("REDIS_URL: load the rate-limit script for the dashboards: %w", err)
		}
		closers = append(closers, func() { _ = ds.Close(); _ = dc.Close() })
		counters, dashboard = ds, ds
	} else {
		mem := enforce.NewMemoryStore(enforce.MemoryOptions{Registerer: metrics, MaxSubjects: d.cfg.MemoryMaxSubjects})
		counters, limiter = mem, mem
	}

	// The control plane: services over Postgres, and the snapshot every
	// request is resolved against, rebuilt on NOTIFY.
	bg, stop := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	planSvc := plans.NewService(d.pool, protectedRoutes, d.logger)
	keySvc := apikeys.NewService(d.pool, protectedRoutes, d.logger).LimitKeysPerUser(d.cfg.KeysPerDeveloper)
	lastUsed := apikeys.NewLastUsed(d.pool, d.logger, d.cfg.LastUsedInterval)
	holder := snapshot.NewHolder(d.pool, d.logger, snapshot.Options{LastUsed: lastUsed, AnonPrefixes: d.cfg.AnonPrefixes})
	if err := holder.Load(ctx); err != nil {
		stop()
		for _, c := range closers {
			c()
		}
		return nil, nil, fmt.Errorf("load plans and keys: %w", err)
	}
	wg.Add(2)
	go func() { defer wg.Done(); _ = holder.Run(bg) }()
	go func() { defer wg.Done(); _ = lastUsed.Run(bg) }()

	mw := enforce.NewMiddleware(limiter, holder, enforce.MiddlewareOptions{
		TrustedProxies: d.cfg.TrustedProxies,
		Logger:         d.logger,
		Registerer:     metrics,
		FailureMode:    d.cfg.RedisFailureMode,
	})

	health := []web.HealthCheck{{Name: "Postgres", Check: d.pool.Ping}}
	if d.redis != nil {
		health = append(health, web.HealthCheck{Name: "Redis", Check: func(ctx context.Context) error {
			return d.redis.Ping(ctx).Err()
		}})
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", healthz)
	mux.Handle("GET /readyz", readyz(d.pool, d.redis, d.logger))
	mux.Handle("GET /metrics", promhttp.HandlerFor(metrics, promhttp.HandlerOpts{Registry: metrics}))
	mux.Handle("/api/", sampleapi.New(mw, sampleapi.Options{Logger: d.logger}))
	mux.Handle(adminapi.Prefix+"/", adminapi.New(adminapi.Deps{
		Plans:  planSvc,
		Keys:   keySvc,
		Tokens: optokens.NewStore(d.pool, d.cfg.AdminToken),
		Store:  cmp.Or(dashboard, limiter), // its key usage reads are a dashboard's
		Pool:   d.pool,
		Logger: d.logger,
	}))
	// The browser surfaces: /admin/ (operators), /app/ and /signup
	// (developers), /docs, /static/, sign-in.
	mux.Handle("/", web.New(web.Deps{
		Logger:         d.logger,
		SessionSecret:  d.cfg.SessionSecret,
		Users:          users.NewRepo(d.pool),
		Pool:           d.pool,
		Plans:          planSvc,
		Keys:           keySvc,
		Limiter:        limiter,
		Dashboard:      dashboard,
		Usage:          counters,
		StreamsPerUser: d.cfg.StreamsPerUser,
		StreamsMax:     d.cfg.StreamsMax,
		Health:         health,
		TrustedProxies: d.cfg.TrustedProxies,
	}))

	return mux, func() {
		stop()
		wg.Wait() // the last-used flusher writes its final batch here
		for _, c := range closers {
			c()
		}
	}, nil
}

// healthz answers 200 while the process is up, whatever its dependencies
// do: a liveness probe must not restart a portal because Postgres blinked.
func healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("ok\n"))
}

// readiness is the /readyz body.
type readiness struct {
	Status string `json:"status"`
	// Failing names each dependency that did not answer, e.g. "postgres".
	Failing []string          `json:"failing,omitempty"`
	Checks  map[string]string `json:"checks"`
}

// readyz answers 200 when Postgres (and Redis, when configured) answer
// within a second, and 503 naming the failing dependency otherwise. Error
// details go to the log, not to the (unauthenticated) response.
func readyz(pool *pgxpool.Pool, rdb redis.UniversalClient, logger *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), time.Second)
		defer cancel()
		res := readiness{Status: "ok", Checks: map[string]string{}}
		check := func(name string, err error) {
			if err == nil {
				res.Checks[name] = "ok"
				return
			}
			logger.Warn("readiness check failed", "dependency", name, "err", err)
			res.Checks[name] = "unreachable"
			res.Failing = append(res.Failing, name)
			res.Status = "unavailable"
		}
		check("postgres", pool.Ping(ctx))
		if rdb != nil {
			check("redis", rdb.Ping(ctx).Err())
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if res.Status != "ok" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(res)
	})
}

// randomToken returns n random bytes, URL-safe base64 encoded.
func randomToken(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}
