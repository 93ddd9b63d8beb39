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
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"

	"github.com/sluicehq/sluice/internal/bootstrap"
	"github.com/sluicehq/sluice/internal/database"
	"github.com/sluicehq/sluice/internal/gateway"
	"github.com/sluicehq/sluice/internal/httplisten"
)

// usageError marks mistakes on the command line (exit status 2).
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// run is the whole program: main only adds the process's signals,
// environment and stdout, so tests can run it in-process. It returns when ctx
// is cancelled (after a graceful shutdown) or on a startup error, whose text
// names the setting to change.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	if len(args) == 0 {
		args = []string{"portal"}
	}
	sub, rest := "serve", args[1:]
	if len(rest) > 0 && (rest[0] == "migrate" || rest[0] == "healthcheck" || rest[0] == "plans" || rest[0] == "playground" || rest[0] == "users") {
		sub, rest = rest[0], rest[1:]
	}
	// The plans and playground subcommands have flags of their own; their
	// settings (DATABASE_URL, ...) come from the environment only.
	cfgArgs := rest
	if sub == "plans" || sub == "playground" || sub == "users" {
		cfgArgs = nil
	}
	cfg, left, err := LoadConfig(cfgArgs, getenv, stdout)
	if cfgArgs == nil {
		left = rest
	}
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return usageError{err}
	}
	logger := newLogger(cfg, stdout)

	if len(left) > 0 && sub != "migrate" && sub != "plans" && sub != "playground" && sub != "users" {
		return usageError{fmt.Errorf("unexpected argument %q (want no arguments, or: migrate up|down|version|force, healthcheck)", left[0])}
	}
	switch sub {
	case "migrate":
		return runMigrate(ctx, cfg, left, logger, stdout)
	case "healthcheck":
		return healthcheck(ctx, cfg.Addr, stdout)
	case "plans":
		return runPlans(ctx, cfg, left, stdout)
	case "playground":
		return runPlayground(ctx, cfg, left, stdout)
	case "users":
		return runUsers(ctx, cfg, left, stdout)
	}
	return serve(ctx, cfg, logger, stdout)
}

func newLogger(cfg Config, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel))
	opts := &slog.HandlerOptions{Level: level}
	if cfg.LogJSON {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// store is the opened store of record, with whatever must be stopped after
// the pool closes.
type store struct {
	pool     *pgxpool.Pool
	embedded *database.Embedded
}

func (s *store) close() {
	if s.pool != nil {
		s.pool.Close()
	}
	if s.embedded != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = s.embedded.Stop(ctx)
	}
}

// openStore connects to DATABASE_URL, or starts the embedded Postgres in the
// data directory when it is unset.
func openStore(ctx context.Context, cfg Config, logger *slog.Logger) (*store, error) {
	if cfg.DatabaseURL != "" {
		pool, err := database.Open(ctx, cfg.DatabaseURL)
		if err != nil {
			return nil, fmt.Errorf("DATABASE_URL: %w; check the URL, that the server runs, and the credentials", err)
		}
		logger.Info("store of record: postgres from DATABASE_URL",
			"host", pool.Config().ConnConfig.Host, "database", pool.Config().ConnConfig.Database)
		return &store{pool: pool}, nil
	}
	e, err := database.StartEmbedded(ctx, database.EmbeddedConfig{DataDir: cfg.DataDir, Logger: logger})
	if err != nil {
		if errors.Is(err, database.ErrDataDir) {
			if strings.Contains(err.Error(), "PORTAL_DATA_DIR") {
				return nil, fmt.Errorf("PORTAL_DATA_DIR: %w", err) // it already says what to change
			}
			return nil, fmt.Errorf("PORTAL_DATA_DIR: %w; set PORTAL_DATA_DIR to a writable directory, or DATABASE_URL to use your own Postgres", err)
		}
		return nil, fmt.Errorf("embedded postgres: %w (or set DATABASE_URL to use your own Postgres)", err)
	}
	pool, err := database.Open(ctx, e.URL())
	if err != nil {
		(&store{embedded: e}).close()
		return nil, fmt.Errorf("embedded postgres: %w", err)
	}
	logger.Info("store of record: embedded postgres", "data_dir", cfg.DataDir)
	return &store{pool: pool, embedded: e}, nil
}

// prepareSchema migrates (or, with -migrate=false, only checks) the schema.
func prepareSchema(ctx context.Context, cfg Config, pool *pgxpool.Pool, logger *slog.Logger) error {
	if !cfg.Migrate {
		if err := database.CheckSchema(ctx, pool); err != nil {
			return fmt.Errorf("refusing to serve: %w", err)
		}
		return nil
	}
	before, after, err := database.Migrate(ctx, pool)
	if err != nil {
		return fmt.Errorf("refusing to serve: %w", err)
	}
	if before.Version != after.Version {
		logger.Info("schema migrated", "from", before.Version, "to", after.Version)
	}
	return nil
}

// loadSessionSecret returns PORTAL_SESSION_SECRET, or the secret kept in the
// data directory, generating it on first start.
func loadSessionSecret(cfg Config) ([]byte, error) {
	if cfg.SessionSecret != nil {
		return cfg.SessionSecret, nil
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("PORTAL_DATA_DIR: cannot create %s: %w; set PORTAL_DATA_DIR to a writable directory or set PORTAL_SESSION_SECRET", cfg.DataDir, err)
	}
	path := filepath.Join(cfg.DataDir, "session.key")
	b, err := os.ReadFile(path)
	if err == nil && len(b) >= 32 {
		return b, nil
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("PORTAL_DATA_DIR: cannot read %s: %w", path, err)
	}
	secret := []byte(randomToken(48))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("PORTAL_DATA_DIR: cannot write %s: %w; set PORTAL_DATA_DIR to a writable directory or set PORTAL_SESSION_SECRET", path, err)
	}
	if _, err := f.Write(secret); err != nil {
		_ = f.Close()
		_ = os.Remove(path)
		return nil, fmt.Errorf("PORTAL_DATA_DIR: cannot write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("PORTAL_DATA_DIR: cannot write %s: %w", path, err)
	}
	return secret, nil
}

// serve runs the portal until ctx ends.
func serve(ctx context.Context, cfg Config, logger *slog.Logger, stdout io.Writer) (err error) {
	// Take the port first: a port in use is the commonest mistake, and
	// nothing should be created before it is found.
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("PORTAL_ADDR: cannot listen on %s: %w; set PORTAL_ADDR to a free address", cfg.Addr, unwrapOp(err))
	}
	defer func() {
		if err != nil {
			_ = ln.Close()
		}
	}()
	var metricsLn net.Listener
	if cfg.MetricsAddr != "" {
		// Loopback by default (defaultMetricsAddr): a second portal on the
		// same host needs an address of its own, or "off".
		if metricsLn, err = net.Listen("tcp", cfg.MetricsAddr); err != nil {
			return fmt.Errorf("PORTAL_METRICS_ADDR: cannot listen on %s: %w; set PORTAL_METRICS_ADDR to a free address, or off", cfg.MetricsAddr, unwrapOp(err))
		}
		defer func() {
			if err != nil {
				_ = metricsLn.Close()
			}
		}()
	}

	var debugLn net.Listener
	if cfg.DebugAddr != "" {
		if debugLn, err = net.Listen("tcp", cfg.DebugAddr); err != nil {
			return fmt.Errorf("PORTAL_DEBUG_ADDR: cannot listen on %s: %w; set PORTAL_DEBUG_ADDR to a free address, or unset it", cfg.DebugAddr, unwrapOp(err))
		}
		defer func() {
			if err != nil {
				_ = debugLn.Close()
			}
		}()
	}

	var proxyLn net.Listener
	if cfg.ProxyAddr != "" {
		if proxyLn, err = net.Listen("tcp", cfg.ProxyAddr); err != nil {
			return fmt.Errorf("PORTAL_PROXY_ADDR: cannot listen on %s: %w; set PORTAL_PROXY_ADDR to a free address, or unset it", cfg.ProxyAddr, unwrapOp(err))
		}
		defer func() {
			if err != nil {
				_ = proxyLn.Close()
			}
		}()
	}

	var grpcLn net.Listener
	var grpcSrv *grpc.Server
	var grpcHealth *health.Server
	if cfg.GRPCAddr != "" {
		grpcLn, err = net.Listen("tcp", cfg.GRPCAddr)
		if err != nil {
			return fmt.Errorf("PORTAL_GRPC_ADDR: cannot listen on %s: %w; set PORTAL_GRPC_ADDR to a free address, or unset it", cfg.GRPCAddr, unwrapOp(err))
		}
		defer func() {
			if err != nil {
				_ = grpcLn.Close()
			}
		}()
		grpcSrv, grpcHealth = newGRPCServer(cfg)
	}

	if cfg.DatabaseURL == "" || cfg.SessionSecret == nil {
		// A data dir this start creates is removed again if the start
		// fails, so a failed first start leaves nothing half-made behind.
		_, statErr := os.Stat(cfg.DataDir)
		created := errors.Is(statErr, os.ErrNotExist)
		if err := checkDataDir(cfg.DataDir); err != nil {
			return err
		}
		if created {
			defer func() {
				if err != nil {
					_ = os.RemoveAll(cfg.DataDir)
				}
			}()
		}
	}

	var rdb redis.UniversalClient
	if cfg.RedisURL != "" {
		client, desc, err := openRedis(ctx, cfg.RedisURL, cfg.RedisTimeout)
		if err != nil {
			return fmt.Errorf("REDIS_URL: %w; check REDIS_URL, or unset it to keep counters in memory (one instance only)", err)
		}
		defer client.Close()
		rdb = client
		logger.Info("rate-limit counters: "+desc, "failure_mode", cfg.RedisFailureMode, "instances", cfg.Instances)
	} else {
		logger.Info("rate-limit counters: in-memory store (single instance; set REDIS_URL to share counters between instances)")
	}
	cfg.MemoryMaxSubjects = memoryMaxSubjects(cfg.MemoryMaxSubjects, logger)

	st, err := openStore(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer st.close()
	if err := prepareSchema(ctx, cfg, st.pool, logger); err != nil {
		return err
	}
	if cfg.SessionSecret, err = loadSessionSecret(cfg); err != nil {
		return err
	}
	boot, err := bootstrap.Run(ctx, st.pool, bootstrap.Options{
		AdminEmail: cfg.AdminEmail, AdminPassword: cfg.AdminPassword, Demo: cfg.Demo, Logger: logger,
	})
	if err != nil {
		return err
	}

	var metricsMux *http.ServeMux
	if metricsLn != nil {
		metricsMux = http.NewServeMux()
	}
	var proxyMux *http.ServeMux
	origin := gateway.ProxyOrigin{URL: cfg.ProxyURL}
	if proxyLn != nil {
		proxyMux = http.NewServeMux()
		origin.Port = strconv.Itoa(proxyLn.Addr().(*net.TCPAddr).Port)
	}
	draining := newDrain()
	handler, closeApp, err := newServer(ctx, serverDeps{cfg: cfg, logger: logger, pool: st.pool, redis: rdb, grpc: grpcSrv,
		metrics: metricsMux, proxy: proxyMux, proxyOrigin: origin, draining: draining})
	if err != nil {
		return err
	}
	defer closeApp()
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		// Above the longest leaky-bucket queue wait a request may sit out.
		WriteTimeout:   90 * time.Second,
		IdleTimeout:    120 * time.Second,
		MaxHeaderBytes: 64 << 10,
		ErrorLog:       slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		BaseContext:    func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	srv.RegisterOnShutdown(draining.close)

	serveErr := make(chan error, 4)
	var metricsSrv *http.Server
	if metricsLn != nil {
		// Its own server, so /metrics can sit on an address only the
		// monitoring network reaches.
		metricsSrv = &http.Server{
			Handler:           metricsMux,
			ReadHeaderTimeout: 5 * time.Second,
			ReadTimeout:       10 * time.Second,
			WriteTimeout:      30 * time.Second,
			IdleTimeout:       120 * time.Second,
			MaxHeaderBytes:    16 << 10,
			ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		}
		fmt.Fprintf(stdout, "Metrics are served on %s/metrics\n", publicURL(metricsLn.Addr()))
		go func() { serveErr <- metricsSrv.Serve(metricsLn) }()
	}
	var debugSrv *http.Server
	if debugLn != nil {
		debugSrv = newDebugServer(logger)
		fmt.Fprintf(stdout, "The profiler is served on %s/debug/pprof/ (keep this address private)\n", publicURL(debugLn.Addr()))
		go func() { serveErr <- debugSrv.Serve(debugLn) }()
		// A profile in progress would hold the shutdown for its length.
		defer debugSrv.Close()
	}
	var proxySrv *http.Server
	if proxyLn != nil {
		// The same limits as the console's server: a proxied response is
		// bounded by the same WriteTimeout.
		proxySrv = &http.Server{
			Handler: proxyMux, ReadHeaderTimeout: srv.ReadHeaderTimeout, ReadTimeout: srv.ReadTimeout,
			WriteTimeout: srv.WriteTimeout, IdleTimeout: srv.IdleTimeout, MaxHeaderBytes: srv.MaxHeaderBytes,
			ErrorLog: srv.ErrorLog, BaseContext: srv.BaseContext,
		}
		fmt.Fprintf(stdout, "The reverse proxy is served on %s\n", publicURL(proxyLn.Addr()))
		go func() { serveErr <- proxySrv.Serve(httplisten.New(proxyLn, httplisten.Every)) }()
	}
	url := publicURL(ln.Addr())
	fmt.Fprintf(stdout, "Sluice is listening on %s\n", url)
	if boot.GeneratedPassword != "" {
		// Printed once, to stdout only: it is not logged and not stored.
		fmt.Fprintf(stdout, "\n  Operator account created. Sign in at %s/admin/\n    email:    %s\n    password: %s\n  Save the password now: it will not be shown again.\n\n",
			url, boot.OperatorEmail, boot.GeneratedPassword)
	}

	// The listener spares a request that waits for Redis net/http's
	// background read system call (internal/httplisten).
	go func() { serveErr <- srv.Serve(httplisten.New(ln, httplisten.Every)) }()
	if grpcSrv != nil {
		logger.Info("Envoy rate-limit service listening", "addr", grpcLn.Addr().String(), "token_required", cfg.GRPCToken != "")
		go func() {
			if err := grpcSrv.Serve(grpcLn); err != nil {
				serveErr <- fmt.Errorf("grpc: %w", err)
			}
		}()
		defer grpcSrv.Stop()
	}
	select {
	case err := <-serveErr:
		return fmt.Errorf("http server: %w", err)
	case <-ctx.Done():
	}
	logger.Info("shutting down", "timeout", cfg.ShutdownTimeout)
	shutdownCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if grpcSrv != nil {
		// Health says NOT_SERVING first, so probes and balancers stop
		// sending new calls while those in flight finish.
		grpcHealth.Shutdown()
		// GracefulStop waits for calls in flight; Stop (deferred above)
		// ends them when the shutdown timeout runs out first.
		stopped := make(chan struct{})
		go func() { grpcSrv.GracefulStop(); close(stopped) }()
		defer func() { <-stopped }()
		go func() {
			select {
			case <-stopped:
			case <-shutdownCtx.Done():
				grpcSrv.Stop()
			}
		}()
	}
	if metricsSrv != nil {
		if err := metricsSrv.Shutdown(shutdownCtx); err != nil {
			return fmt.Errorf("graceful shutdown of the metrics server: %w", err)
		}
	}
	if proxySrv != nil {
		if err := proxySrv.Shutdown(shutdownCtx); err != nil {
			return fmt.Errorf("graceful shutdown of the reverse proxy: %w", err)
		}
	}
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("graceful shutdown: %w", err)
	}
	logger.Info("stopped")
	return nil
}

// checkDataDir creates the data directory and proves it writable, so the
// failure is one line naming PORTAL_DATA_DIR rather than an error deep
// inside Postgres.
func checkDataDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("PORTAL_DATA_DIR: cannot create %s: %w; set PORTAL_DATA_DIR to a writable directory", dir, err)
	}
	f, err := os.CreateTemp(dir, ".write-test-*")
	if err != nil {
		return fmt.Errorf("PORTAL_DATA_DIR: %s is not writable: %w; set PORTAL_DATA_DIR to a writable directory", dir, err)
	}
	_ = f.Close()
	return os.Remove(f.Name())
}

// healthcheck is `portal healthcheck`: GET /readyz on the local portal,
// failing unless it answers 200. Container images without a shell or curl use
// it as their health check.
func healthcheck(ctx context.Context, addr string, stdout io.Writer) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(host, port)+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	fmt.Fprint(stdout, string(body))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthcheck: /readyz answered %s", resp.Status)
	}
	return nil
}

// publicURL is the address to print: a wildcard host becomes localhost.
func publicURL(addr net.Addr) string {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok {
		return "http://" + addr.String()
	}
	host := tcp.IP.String()
	if tcp.IP.IsUnspecified() {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, strconv.Itoa(tcp.Port))
}

// unwrapOp drops net.OpError's repetition of the address.
func unwrapOp(err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Err
	}
	return err
}
