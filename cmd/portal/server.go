package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/failover"
	"github.com/sluicehq/sluice/internal/enforce/httplimit"
	"github.com/sluicehq/sluice/internal/enforce/leased"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/enforce/redisstore"
	"github.com/sluicehq/sluice/internal/gateway"
	"github.com/sluicehq/sluice/internal/history"
	"github.com/sluicehq/sluice/internal/keyverify"
	"github.com/sluicehq/sluice/internal/ledger"
	"github.com/sluicehq/sluice/internal/optokens"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/playground"
	"github.com/sluicehq/sluice/internal/region"
	"github.com/sluicehq/sluice/internal/sampleapi"
	"github.com/sluicehq/sluice/internal/services"
	"github.com/sluicehq/sluice/internal/signin"
	"github.com/sluicehq/sluice/internal/snapshot"
	"github.com/sluicehq/sluice/internal/tokenlimit"
	"github.com/sluicehq/sluice/internal/traffic"
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
	// grpc, when PORTAL_GRPC_ADDR is set, receives Envoy's rate-limit
	// service.
	grpc *grpc.Server
	// metrics, when set, is where GET /metrics is mounted
	// (PORTAL_METRICS_ADDR); nil mounts it on the main mux with
	// PORTAL_METRICS_ADDR=public, and nowhere otherwise.
	metrics *http.ServeMux
	// proxy, when set, is the reverse proxy's own listener's mux
	// (PORTAL_PROXY_ADDR); proxyOrigin says where the proxy is reached.
	proxy       *http.ServeMux
	proxyOrigin gateway.ProxyOrigin
	// draining, when set, is closed as the server starts shutting down:
	// the guards' long polls then end at once.
	draining *drain
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
		// dashboardClient is the dashboards' own Redis client (nil without
		// Redis), which the playground's recorder writes through as well.
		dashboardClient redis.UniversalClient
		closers         []func()
		quotaLedger     *ledger.Ledger
		// shared is the Redis store leases are taken from (nil without
		// Redis).
		shared *redisstore.Store
	)
	// Traces first, so that every way out of here flushes them.
	tracer, stopTracing, err := startTracing(ctx, d.cfg.Tracing, d.logger)
	if err != nil {
		return nil, nil, err
	}
	closers = append(closers, stopTracing)
	if d.redis != nil {
		// The dashboards read (and the usage series are written) through a
		// client of their own, apart from the decisions' connections.
		dc, err := dashboardRedis(d.cfg.RedisURL, d.cfg.DashboardRedisPool, d.cfg.DashboardRedisTimeout)
		if err != nil {
			return nil, nil, fmt.Errorf("REDIS_URL: %w", err)
		}
		dashboardClient = dc
		rs, err := redisstore.New(d.redis, redisstore.Options{
			Prefix: d.cfg.RedisPrefix, Timeout: d.cfg.RedisTimeout, Registerer: metrics, UsageClient: dc,
			NegativeCacheSize: d.cfg.RedisNearCache,
		})
		if err != nil {
			_ = dc.Close()
			return nil, nil, fmt.Errorf("REDIS_URL: load the rate-limit script: %w", err)
		}
		// The dashboards' Peeks go through a store over that client, with
		// its own pipeline and no breaker.
		ds, err := redisstore.New(dc, redisstore.Options{
			Prefix: d.cfg.RedisPrefix, Timeout: d.cfg.DashboardRedisTimeout, DisableUsage: true,
		})
		if err != nil {
			_ = rs.Close()
			_ = dc.Close()
			return nil, nil, fmt.Errorf("REDIS_URL: load the rate-limit script for the dashboards: %w", err)
		}
		// In this order: the request path's store flushes its last usage
		// through the dashboards' client before that closes.
		closers = append(closers, func() { _ = rs.Close() }, func() { _ = ds.Close() }, func() { _ = dc.Close() })
		fo := failover.Options{
			Timeout: d.cfg.RedisTimeout, Instances: d.cfg.Instances, Logger: d.logger, Registerer: metrics,
		}
		lo := ledger.Options{Shared: rs, Logger: d.logger}
		if d.cfg.RedisFailureMode == enforce.FailLocal {
			mem := memstore.New(memstore.Options{MaxSubjects: d.cfg.MemoryMaxSubjects})
			// A sync region whose own Redis is down holds to its share.
			fo.Local, lo.Local = region.LocalShare(mem, d.cfg.Region), mem
		}
		counters, limiter, dashboard, shared = rs, failover.New(rs, fo), ds, rs
		quotaLedger = ledger.New(limiter, d.pool, lo)
	} else {
		mem := memstore.New(memstore.Options{Registerer: metrics, MaxSubjects: d.cfg.MemoryMaxSubjects})
		counters, limiter = mem, mem
		quotaLedger = ledger.New(mem, d.pool, ledger.Options{Shared: mem, Logger: d.logger})
	}
	// Quotas are durable: every decision goes through the ledger, which
	// records quota consumption in Postgres and rebuilds a counter the
	// store lost (docs/failure.md, "Quotas survive a Redis restart").
	limiter = quotaLedger

	// Precision (issue 34): leased and local tiers are decided in memory
	// around the exact store; exact ones pass through. Leases come from
	// this region's Redis, so with regions every tier is decided exactly.
	if shared != nil && d.cfg.Region.Mode == region.Shared {
		lz := leased.New(limiter, shared, leased.Options{Instances: d.cfg.Instances, Logger: d.logger, MaxSubjects: d.cfg.MemoryMaxSubjects})
		// First: what the leases hold goes back before Redis's clients close.
		closers = append([]func(){func() { _ = lz.Close() }}, closers...)
		limiter, dashboard = lz, lz.Dashboard(dashboard)
	}

	// Regions: this region's share of every limit, or its own counts plus
	// its peers' (PORTAL_REGION_MODE); shared passes decisions through.
	// Shared is left unwrapped so the middleware keeps the store's
	// allocation-free AllowInto.
	var (
		regions      *region.Store
		regionStatus func() region.Status
		regionSource web.RegionSource
		regionUsage  map[string]web.UsageReader
	)
	if d.cfg.Region.Mode != region.Shared {
		rs, peerUsage, closePeers, err := openRegions(d, limiter)
		if err == nil {
			if err = rs.Register(metrics); err != nil {
				closePeers()
			}
		}
		if err != nil {
			for _, c := range closers {
				c()
			}
			return nil, nil, err
		}
		closers = append(closers, closePeers)
		regions, regionStatus, regionSource, regionUsage, limiter = rs, rs.Status, rs, peerUsage, rs
	}

	// The control plane: services over Postgres, and the snapshot every
	// request is resolved against, rebuilt on NOTIFY.
	bg, stop := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	planSvc := plans.NewService(d.pool, protectedRoutes, d.logger).WithReducedAnswers(sampleapi.ReducedAnswerRoutes())
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
	if regions != nil {
		wg.Add(1)
		go func() { defer wg.Done(); _ = regions.Run(bg) }()
	}
	wg.Add(1)
	go func() { defer wg.Done(); _ = quotaLedger.Run(bg) }()
	wg.Add(2)
	go func() { defer wg.Done(); _ = holder.Run(bg) }()
	go func() { defer wg.Done(); _ = lastUsed.Run(bg) }()

	// The playground's recorded traffic: every decision the middleware
	// asks for is an arrival, recorded off the request path.
	decider := limiter
	var recorder *traffic.Recorder
	if d.cfg.TrafficRecording {
		var sink traffic.Sink = traffic.NewMemorySink()
		if dashboardClient != nil {
			// Off the request path's connections, like the usage series.
			sink = traffic.NewRedisSink(dashboardClient, d.cfg.RedisPrefix)
		}
		recorder = traffic.NewRecorder(sink, traffic.Options{Logger: d.logger})
		wg.Add(1)
		go func() { defer wg.Done(); _ = recorder.Run(bg) }()
		decider = traffic.Wrap(limiter, recorder)
	}
	// Usage history: every decision and every shadow tier's would-be
	// rejection is tallied in memory and added to Postgres each flush
	// interval; the final flush runs when bg ends, after the HTTP server
	// has drained.
	usageHistory := history.NewRecorder(d.pool, history.Options{
		FlushInterval: d.cfg.HistoryFlushInterval, Logger: d.logger, Registerer: metrics,
	})
	wg.Add(1)
	go func() { defer wg.Done(); _ = usageHistory.Run(bg) }()
	// The request log and analytics (issue 36): every way in through the
	// middleware logs each decision with usage.writer.Log, which buffers it
	// and writes off the request path (docs/usage-data.md).
	usage, err := startUsage(bg, &wg, d, metrics, holder, cmp.Or(dashboard, limiter))
	if err != nil {
		stop()
		wg.Wait()
		for _, c := range closers {
			c()
		}
		return nil, nil, err
	}
	// Threshold alerts (issue 12, item 5) and the portal's email: see
	// alerts.go.
	var alertDeps alertsDeps
	mailer, err := newMailer(d.cfg)
	if err == nil {
		alertDeps, err = startAlerts(bg, &wg, d, cmp.Or(dashboard, limiter), mailer)
	}
	if err == nil && mailer != nil {
		startKeyNotices(bg, &wg, d, mailer)
	}
	if err != nil {
		stop()
		wg.Wait()
		for _, c := range closers {
			c()
		}
		return nil, nil, err
	}

	mw := httplimit.NewMiddleware(decider, holder, httplimit.Options{
		TrustedProxies: d.cfg.TrustedProxies,
		Logger:         d.logger,
		Registerer:     metrics,
		FailureMode:    d.cfg.RedisFailureMode,
		Record:         usageHistory,
		RequestLog:     usage.writer,
		Settled:        usageHistory,
		Shadow:         usageHistory,
		SlotLease:      d.cfg.ConcurrencyLease,
		Tracer:         tracer,
	})

	health := []web.HealthCheck{{Name: "Postgres", Check: d.pool.Ping}}
	if d.redis != nil {
		health = append(health, web.HealthCheck{Name: "Redis", Check: func(ctx context.Context) error {
			return d.redis.Ping(ctx).Err()
		}})
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", healthz)
	mux.Handle("GET /readyz", readyzRegions(d.pool, d.redis, regionStatus, d.logger))
	metricsMux := d.metrics
	if metricsMux == nil && d.cfg.MetricsPublic {
		metricsMux = mux
	}
	if metricsMux != nil {
		metricsMux.Handle("GET /metrics", requireBearer(d.cfg.MetricsToken,
			promhttp.HandlerFor(metrics, promhttp.HandlerOpts{Registry: metrics})))
	}
	// The doors that take a token (the admin API, the policy feed) are
	// limited per client address with the engine itself (issue 30, item 12).
	doors := tokenlimit.New(tokenlimit.Options{
		Store:      limiter,
		Fallback:   memstore.New(memstore.Options{MaxSubjects: d.cfg.MemoryMaxSubjects}),
		ClientAddr: func(r *http.Request) netip.Addr { return httplimit.ClientIP(r, d.cfg.TrustedProxies) },
		Blocks:     d.cfg.AnonPrefixes,
		Failures:   int64(d.cfg.TokenFailures),
		Requests:   int64(d.cfg.TokenRequests),
		Logger:     d.logger,
	})
	mux.Handle("/api/", sampleapi.New(mw, sampleapi.Options{Logger: d.logger}))
	// Gateways in front of other APIs ask here, any method (gateway.Check).
	catalogs := gateway.CatalogFunc(func() *services.Catalog { return holder.Current().Services() })
	mux.Handle(gateway.CheckPath, gateway.NewCheck(catalogs, mw.WayIn(httplimit.WayInCheck).WithSlotLease(d.cfg.Gateway.SlotLease), d.logger))
	mux.Handle(gateway.ReleasePath, gateway.NewRelease(mw, d.logger))
	// Services check a key and read its limits here, spending nothing
	// (issue 36), with a service token: a door that takes a token, so
	// its failed authentications are limited like the others'.
	mux.Handle(keyverify.Path, doors.Wrap("keys-verify", keyverify.New(holder, enforce.NewEngine(limiter, enforce.EngineOptions{}), limiter, services.NewRepo(d.pool), keyverify.Options{
		PerService: int64(d.cfg.Usage.VerifyPerService), PerAddress: int64(d.cfg.Usage.VerifyPerAddress),
		TrustedProxies: d.cfg.TrustedProxies, Logger: d.logger,
	})))
	mux.Handle(keyverify.OpenAPIPath, keyverify.OpenAPI())
	// Programs enforcing with the guard package fetch the policy here.
	mux.Handle(gateway.PolicyPath, doors.Wrap("policy", endOnDrain(gateway.NewPolicyFeed(gateway.SnapshotPolicy(holder), services.NewRepo(d.pool), d.logger), d.draining)))
	// The guards' decisions, for the request log (issue 36): they alone see
	// their API's status and latency.
	mux.Handle(gateway.GuardLogPath, doors.Wrap("policy-log", gateway.NewGuardLog(services.NewRepo(d.pool), usage.writer, d.logger)))
	// Services with an upstream URL: on the proxy's own listener, by host
	// name and by path, and by host name (sandboxed) around the whole mux
	// below. The console's own origin never serves an upstream's content:
	// its /proxy/ redirects to the proxy's listener (issue 30, item 1).
	proxy := gateway.NewProxy(catalogs, mw.WayIn(httplimit.WayInProxy), nil, d.logger)
	mux.Handle(gateway.ProxyPrefix, d.proxyOrigin.ConsoleProxyPath())
	if d.proxy != nil {
		d.proxy.Handle("/", gateway.Listener(catalogs, proxy))
	}
	if d.grpc != nil {
		rlsv3.RegisterRateLimitServiceServer(d.grpc, gateway.NewRateLimitService(catalogs, mw.WayIn(httplimit.WayInEnvoy).WithSlotLease(d.cfg.Gateway.SlotLease), gateway.RateLimitServiceOptions{Logger: d.logger, Registerer: metrics}))
	}
	// One bound on replays running at once, whichever way they come in.
	replays := playground.NewRunner(playground.DefaultParallel)
	mux.Handle(adminapi.Prefix+"/", doors.Wrap("admin-api", adminapi.New(adminapi.Deps{
		Plans:   planSvc,
		Keys:    keySvc,
		Tokens:  optokens.NewStore(d.pool, d.cfg.AdminToken),
		Store:   adminStore{Store: cmp.Or(dashboard, limiter), ledger: quotaLedger}, // its key usage reads are a dashboard's
		Pool:    d.pool,
		Logger:  d.logger,
		Traffic: recorder,

		Playground: replays,
	})))
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
		Quotas:         quotaLedger, // grants and resets recorded, as the admin API's
		Usage:          counters,
		StreamsPerUser: d.cfg.StreamsPerUser,
		StreamsMax:     d.cfg.StreamsMax,
		Health:         health,
		TrustedProxies: d.cfg.TrustedProxies,
		SignIn:         signInPolicy(d.cfg),
		Regions:        regionSource,
		RegionUsage:    regionUsage,
		Traffic:        recorder,
		Playground:     replays,
		History:        history.NewReader(d.pool),
		RequestLog:     usage.reader,
		Analytics:      usage.analytics,
		Headroom:       usage.headroom,
		UsageRecords:   usage.records,
		// What the request log pages say it holds.
		RequestLogAdmitSample: d.cfg.Usage.AdmitSample,
		RequestLogRetention:   d.cfg.Usage.Retention,
		Alerts:                alertDeps.service,
		AlertSender:           alertDeps.worker,
		AlertEmail:            alertDeps.email,
		ServiceURL:            d.proxyOrigin.ServiceURL,
		SSO:                   d.cfg.SSO.client(d.logger),
		SSOPolicy:             d.cfg.SSO.policy(),
		Mailer:                accountMailer(d, mailer),
		PublicURL:             d.cfg.PublicURL,
		Instances:             d.cfg.Instances,
	}))

	return gateway.ByHost(catalogs, proxy, mux), func() {
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

// openRegions wraps limiter for the region settings and opens a store on
// each peer's Redis (sync publishes to it; share only shows its state and
// usage on the dashboard). An unreachable peer does not stop
// the start: the region enforces its share until the peer answers.
func openRegions(d serverDeps, limiter enforce.Store) (*region.Store, map[string]web.UsageReader, func(), error) {
	var (
		peers   []region.PeerStore
		usage   = map[string]web.UsageReader{}
		closers []func()
	)
	closeAll := func() {
		for _, c := range closers {
			c()
		}
	}
	for _, p := range d.cfg.PeerRedisURLs {
		opts, _, err := redisOptions(p.URL)
		if err != nil {
			closeAll()
			return nil, nil, nil, fmt.Errorf("PORTAL_PEER_REDIS_URLS: region %s: %w", p.Name, err)
		}
		opts.ReadTimeout, opts.WriteTimeout = d.cfg.RedisTimeout, d.cfg.RedisTimeout
		client := redis.NewUniversalClient(opts)
		closers = append(closers, func() { _ = client.Close() })
		store, err := redisstore.New(client, redisstore.Options{
			Prefix: d.cfg.RedisPrefix, Timeout: d.cfg.RedisTimeout, DisableUsage: true,
		})
		if err != nil {
			closeAll()
			return nil, nil, nil, fmt.Errorf("PORTAL_PEER_REDIS_URLS: region %s: load the rate-limit script: %w", p.Name, err)
		}
		closers = append(closers, func() { _ = store.Close() })
		usage[p.Name] = store
		timeout := d.cfg.RedisTimeout
		peers = append(peers, region.PeerStore{Name: p.Name, Charger: store, Ping: func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			return client.Ping(ctx).Err()
		}})
	}
	rs, err := region.New(limiter, d.cfg.Region, peers, d.logger)
	if err != nil {
		closeAll()
		return nil, nil, nil, fmt.Errorf("PORTAL_REGION_MODE: %w", err)
	}
	d.logger.Info("regions: "+string(d.cfg.Region.Mode), "region", d.cfg.Region.Region, "peers", len(peers), "sync_interval", d.cfg.Region.Interval)
	return rs, usage, closeAll, nil
}

// readiness is the /readyz body.
type readiness struct {
	Status string `json:"status"`
	// Failing names each dependency that did not answer, e.g. "postgres".
	Failing []string `json:"failing,omitempty"`
	// Degraded names each peer region that did not answer (sync mode):
	// the portal still serves, holding to its share of every limit, so
	// the status is "degraded" with a 200, not a failure.
	Degraded []string          `json:"degraded,omitempty"`
	Checks   map[string]string `json:"checks"`
}

// readyz answers 200 when Postgres (and Redis, when configured) answer
// within a second, and 503 naming the failing dependency otherwise. Error
// details go to the log, not to the (unauthenticated) response.
func readyz(pool *pgxpool.Pool, rdb redis.UniversalClient, logger *slog.Logger) http.Handler {
	return readyzRegions(pool, rdb, nil, logger)
}

// readyzRegions is readyz that also names each peer region the last sync
// round could not reach (regions may be nil): status "degraded", still 200.
func readyzRegions(pool *pgxpool.Pool, rdb redis.UniversalClient, regions func() region.Status, logger *slog.Logger) http.Handler {
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
		// Peers as the last sync round found them: asking them here would
		// make the probe wait on another region's network.
		var st region.Status
		if regions != nil {
			st = regions()
		}
		for _, p := range st.Peers {
			name := "region:" + p.Name
			if p.Reachable {
				res.Checks[name] = "ok"
				continue
			}
			res.Checks[name] = "unreachable"
			if st.Mode != region.Sync {
				continue // share never needed it to enforce
			}
			res.Degraded = append(res.Degraded, name)
			if res.Status == "ok" {
				res.Status = "degraded"
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if len(res.Failing) > 0 {
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

// requireBearer lets through only requests carrying token as a bearer
// credential (compared in constant time); an empty token lets everyone
// through. A Prometheus scrape config sets it with authorization.credentials.
func requireBearer(token string, next http.Handler) http.Handler {
	if token == "" {
		return next
	}
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := []byte(r.Header.Get("Authorization"))
		if subtle.ConstantTimeCompare(got, want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="metrics"`)
			http.Error(w, "a bearer token is required for /metrics (PORTAL_METRICS_TOKEN)", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// signInPolicy is the sign-in throttle's policy, counting clients by the
// same address blocks as anonymous API callers.
func signInPolicy(cfg Config) signin.Policy {
	p := cfg.SignIn
	p.Blocks = cfg.AnonPrefixes
	return p
}
