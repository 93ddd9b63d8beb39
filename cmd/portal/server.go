package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
)

// serverDeps is what the HTTP surfaces are built from.
type serverDeps struct {
	cfg    Config
	logger *slog.Logger
	pool   *pgxpool.Pool
	// redis is nil when REDIS_URL is unset (in-memory counters).
	redis redis.UniversalClient
}

// newServer builds the portal's whole HTTP surface on one root ServeMux:
// the one place where every part of Sluice is mounted. It returns the handler
// and a function that releases what the surfaces started (background
// reloads, flushers), to call after the HTTP server has shut down.
func newServer(ctx context.Context, d serverDeps) (http.Handler, func(), error) {
	metrics := prometheus.NewRegistry()
	metrics.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)

	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", healthz)
	mux.Handle("GET /readyz", readyz(d.pool, d.redis, d.logger))
	mux.Handle("GET /metrics", promhttp.HandlerFor(metrics, promhttp.HandlerOpts{Registry: metrics}))

	// Mount the other surfaces here, each behind its own prefix:
	//   /api/          the sample API behind the enforce middleware
	//   /admin/        operator UI, /admin/api/v1/ the admin JSON API
	//   /app/          developer UI, /docs generated limit docs
	//   /static/       assets
	mux.HandleFunc("GET /{$}", home)

	return mux, func() {}, nil
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

// home points a person who opens the printed URL at the surfaces.
func home(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write([]byte(`<!doctype html><title>Sluice</title><h1>Sluice</h1><ul>
<li><a href="/admin/">Operator console</a></li><li><a href="/app/">Developer portal</a></li>
<li><a href="/docs">API limits documentation</a></li><li><a href="/readyz">Readiness</a></li></ul>`))
}

// randomToken returns n random bytes, URL-safe base64 encoded.
func randomToken(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}
