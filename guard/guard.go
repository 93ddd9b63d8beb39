// Package guard enforces a Sluice portal's plans inside any Go service: it
// fetches the policy (plans, their limits, API key hashes) from the portal
// over HTTP with a service token, keeps it current by long polling (a plan
// edit or a key revocation arrives within the portal's rebuild time, well
// under a second), decides on the same Redis as the portal (or in this
// process's memory), and wraps an http.Handler with the very middleware the
// portal runs: same identification, same headers, same 429 body, same
// counters. It needs no Postgres credentials.
//
// Register wrapped handlers on a net/http ServeMux: the route a tier names
// is the pattern the mux matched (r.Pattern), so declare the same patterns
// as the service's routes in the portal.
//
//	g, err := guard.New(ctx, guard.Options{
//		PortalURL: "https://sluice.internal",
//		Token:     os.Getenv("SLUICE_SERVICE_TOKEN"),
//		Redis:     redis.NewClient(&redis.Options{Addr: "redis:6379"}),
//	})
//	mux.Handle("GET /items/{id}", g.Wrap(items))
package guard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/failover"
	"github.com/sluicehq/sluice/internal/enforce/httplimit"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/enforce/redisstore"
	"github.com/sluicehq/sluice/internal/policy"
	"go.opentelemetry.io/otel/trace"
)

// Options configures New. PortalURL and Token are required.
type Options struct {
	// PortalURL is the portal's base URL, e.g. "https://sluice.internal".
	PortalURL string
	// Token is a service token (sluice_svc_...) the operator issued for
	// this service in the portal.
	Token string
	// Redis, when set, holds the counters, shared with the portal and every
	// other guard: use the portal's REDIS_URL. Nil keeps them in this
	// process's memory (one instance).
	Redis redis.UniversalClient
	// RedisPrefix must equal the portal's PORTAL_REDIS_PREFIX (default
	// "sluice:") for the counters to be shared.
	RedisPrefix string
	// TrustedProxies are the peers whose X-Forwarded-For is believed, as
	// PORTAL_TRUSTED_PROXIES.
	TrustedProxies []netip.Prefix
	// FailureMode is what a request gets while Redis cannot be reached,
	// as the portal's PORTAL_REDIS_FAILURE_MODE, with the same values and
	// the same default: FailLocal ("" means FailLocal), FailOpen or
	// FailClosed. Without Redis it has nothing to do.
	FailureMode FailureMode
	// Instances is how many instances of this service share the Redis, as
	// the portal's PORTAL_INSTANCES: in FailLocal each instance enforces
	// its share of every limit (divided, rounded up). Values below 1 mean 1.
	Instances int
	// RedisTimeout bounds one decision's wait for Redis before the failure
	// mode decides it, as the portal's PORTAL_REDIS_TIMEOUT (0 means the
	// portal's default, 1 s).
	RedisTimeout time.Duration
	// FailOpen is FailureMode FailOpen when FailureMode is unset.
	//
	// Deprecated: set FailureMode.
	FailOpen bool
	// Client fetches the policy (default: a client with no overall timeout,
	// since long polls last up to Wait).
	Client *http.Client
	// Wait is how long one long poll waits for a change (default 30 s, at
	// most 60 s).
	Wait time.Duration
	// Logger receives fetch failures; never a key or the token.
	Logger *slog.Logger
	// Registerer, when set, receives the decision metrics the portal
	// exports (sluice_enforce_requests_total and
	// sluice_enforce_decision_seconds), labelled way_in="guard", so one
	// dashboard sums a limit's traffic over the portal and its guards.
	Registerer prometheus.Registerer
	// Tracer, when set, traces each decision as the portal does with
	// PORTAL_TRACES: a sluice.decision span (way_in "guard", route, plan,
	// key id, never the key) with a sluice.store child.
	Tracer trace.Tracer
	// CacheFile, when set, is where the guard keeps the last policy it
	// fetched (rewritten on every change, mode 0600: it holds the API
	// keys' hashes), so that New can start from it while the portal
	// cannot be reached: an autoscaled or restarted service comes up
	// during a portal outage, enforcing the policy it last knew.
	CacheFile string
	// CacheMaxAge is the oldest cached policy New starts from (default
	// DefaultCacheMaxAge); an older one is refused, as is any when the
	// portal refuses the token.
	CacheMaxAge time.Duration
	// NoRequestLog stops the guard reporting its decisions to the portal's
	// request log (POST /v1/policy/log with Token, in batches every
	// second, off the request path; past 8,192 waiting they are dropped).
	// By default they are reported: the guard alone sees the protected
	// API's status and latency.
	NoRequestLog bool
}

// DefaultCacheMaxAge is the default of Options.CacheMaxAge.
const DefaultCacheMaxAge = 24 * time.Hour

// FailureMode says what a request gets while the shared counters (Redis)
// cannot be reached; its values are the portal's PORTAL_REDIS_FAILURE_MODE.
type FailureMode string

const (
	// FailLocal, the default, decides on this process's memory, each limit
	// divided by Options.Instances, every header kept and marked
	// Sluice-RateLimit-Degraded: local.
	FailLocal FailureMode = "local"
	// FailOpen admits requests without a decision, marked
	// Sluice-RateLimit-Degraded: store-unavailable.
	FailOpen FailureMode = "open"
	// FailClosed answers 503 with Retry-After.
	FailClosed FailureMode = "closed"
)

// Guard enforces the portal's policy. Create it with New; it is safe for
// concurrent use.
type Guard struct {
	opts     Options
	policy   *url.URL
	resolver *policy.Resolver
	mw       *httplimit.Middleware
	log      *slog.Logger
	cancel   context.CancelFunc
	done     chan struct{}
	report   *reporter // nil with NoRequestLog

	mu   sync.Mutex
	etag string
}

// ErrUnauthorized means the portal refused the service token.
var ErrUnauthorized = errors.New("guard: the portal refused the service token")

// New fetches the policy once (so that the first request is already
// enforced) and keeps it current in the background until ctx ends or Close
// is called. A portal that cannot be reached is an error, unless
// Options.CacheFile holds a policy no older than CacheMaxAge: New then
// starts from it and logs so.
func New(ctx context.Context, opts Options) (*Guard, error) {
	if opts.PortalURL == "" || opts.Token == "" {
		return nil, errors.New("guard: Options.PortalURL and Options.Token are required")
	}
	base, err := url.Parse(strings.TrimSuffix(opts.PortalURL, "/") + "/v1/policy")
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") {
		return nil, fmt.Errorf("guard: PortalURL %q is not an http(s) URL", opts.PortalURL)
	}
	if opts.Client == nil {
		opts.Client = &http.Client{}
	}
	if opts.Wait <= 0 {
		opts.Wait = 30 * time.Second
	}
	opts.Wait = min(opts.Wait, 60*time.Second)
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.CacheMaxAge <= 0 {
		opts.CacheMaxAge = DefaultCacheMaxAge
	}
	if opts.FailureMode == "" {
		opts.FailureMode = FailLocal
		if opts.FailOpen {
			opts.FailureMode = FailOpen
		}
	}
	mode, err := enforce.ParseFailureMode(string(opts.FailureMode))
	if err != nil {
		return nil, fmt.Errorf("guard: Options.FailureMode: %w", err)
	}
	if opts.RedisTimeout <= 0 {
		opts.RedisTimeout = enforce.DefaultStoreTimeout
	}
	var store enforce.Store
	if opts.Redis != nil {
		// Wired as the portal wires its own: a timeout and a circuit
		// breaker around Redis, and in the local mode a memory store
		// deciding each instance's share while Redis is away.
		rs, err := redisstore.New(opts.Redis, redisstore.Options{Prefix: opts.RedisPrefix, DisableUsage: true, Timeout: opts.RedisTimeout})
		if err != nil {
			return nil, fmt.Errorf("guard: %w", err)
		}
		fo := failover.Options{Timeout: opts.RedisTimeout, Instances: opts.Instances, Logger: opts.Logger}
		if mode == enforce.FailLocal {
			fo.Local = memstore.New(memstore.Options{})
		}
		store = failover.New(rs, fo)
	} else {
		store = memstore.New(memstore.Options{})
	}
	g := &Guard{opts: opts, policy: base, resolver: policy.NewResolver(nil), log: opts.Logger, done: make(chan struct{})}
	mo := httplimit.Options{
		TrustedProxies: opts.TrustedProxies, Logger: opts.Logger, FailureMode: mode,
		Registerer: opts.Registerer, WayIn: httplimit.WayInGuard, Tracer: opts.Tracer,
	}
	if !opts.NoRequestLog {
		g.report = newReporter(strings.TrimSuffix(opts.PortalURL, "/")+"/v1/policy/log", opts.Token, opts.Client, g.log)
		mo.RequestLog = g.report
	}
	g.mw = httplimit.NewMiddleware(store, g.resolver, mo)
	if _, err := g.fetch(ctx, 0); err != nil {
		if errors.Is(err, ErrUnauthorized) || opts.CacheFile == "" {
			return nil, err
		}
		age, cerr := g.loadCache()
		if cerr != nil {
			return nil, fmt.Errorf("%w; no cached policy to start from: %w", err, cerr)
		}
		g.log.WarnContext(ctx, "sluice guard: the portal cannot be reached; starting from the cached policy",
			"err", err, "cache_age", age.Round(time.Second), "policy_version", g.Version())
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	g.cancel = cancel
	go func() {
		defer close(g.done)
		select {
		case <-ctx.Done():
			cancel()
		case <-runCtx.Done():
		}
	}()
	go g.run(runCtx)
	if g.report != nil {
		go g.report.run(runCtx)
	}
	return g, nil
}

// Wrap returns next with the caller's limits enforced, exactly as the
// portal's embedded middleware does. Register the result on a ServeMux.
func (g *Guard) Wrap(next http.Handler) http.Handler { return g.mw.Wrap(next) }

// Version is the policy version being enforced.
func (g *Guard) Version() uint64 { return g.resolver.Version() }

// Close stops keeping the policy current; wrapped handlers keep enforcing
// the last one.
func (g *Guard) Close() {
	g.cancel()
	<-g.done
	if g.report != nil {
		<-g.report.done // the decisions still queued are sent, once
	}
}

// pollSlack is how much longer than the long poll's wait a fetch may take
// before it counts as failed: a portal that accepts connections and never
// answers (a hung host) is noticed, not waited for.
const pollSlack = 10 * time.Second

// run long-polls the portal until ctx ends, backing off after failures. It
// logs losing the portal once, at the first failure, and regaining it once,
// with how long it was lost; the failures between are debug lines, so an
// outage does not flood the log.
func (g *Guard) run(ctx context.Context) {
	backoff := 100 * time.Millisecond
	var lostAt time.Time
	for ctx.Err() == nil {
		fetchCtx, cancel := context.WithTimeout(ctx, g.opts.Wait+pollSlack)
		_, err := g.fetch(fetchCtx, g.opts.Wait)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if lostAt.IsZero() {
				lostAt = time.Now()
				g.log.WarnContext(ctx, "sluice guard: lost the portal; enforcing the last policy until it answers again", "err", err, "policy_version", g.Version())
			} else {
				g.log.DebugContext(ctx, "sluice guard: the portal still does not answer", "err", err, "retry_in", backoff)
			}
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			backoff = min(backoff*2, 10*time.Second)
			continue
		}
		if !lostAt.IsZero() {
			g.log.InfoContext(ctx, "sluice guard: reached the portal again", "lost_for", time.Since(lostAt).Round(time.Millisecond), "policy_version", g.Version())
			lostAt = time.Time{}
		}
		backoff = 100 * time.Millisecond
	}
}

// fetch asks for the policy, waiting up to wait for a change from the one
// held, and installs what it gets; changed reports whether it got one.
func (g *Guard) fetch(ctx context.Context, wait time.Duration) (changed bool, err error) {
	u := *g.policy
	g.mu.Lock()
	etag := g.etag
	g.mu.Unlock()
	if wait > 0 && etag != "" {
		u.RawQuery = "wait=" + fmt.Sprint(int(wait/time.Second))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return false, fmt.Errorf("guard: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+g.opts.Token)
	if etag != "" {
		req.Header.Set("If-None-Match", etag)
	}
	res, err := g.opts.Client.Do(req)
	if err != nil {
		return false, fmt.Errorf("guard: fetch policy: %w", err)
	}
	defer res.Body.Close()
	switch res.StatusCode {
	case http.StatusNotModified:
		return false, nil
	case http.StatusOK:
	case http.StatusUnauthorized:
		return false, ErrUnauthorized
	default:
		b, _ := io.ReadAll(io.LimitReader(res.Body, 512))
		return false, fmt.Errorf("guard: fetch policy: %s: %s", res.Status, strings.TrimSpace(string(b)))
	}
	raw, err := io.ReadAll(io.LimitReader(res.Body, 1<<30))
	if err != nil {
		return false, fmt.Errorf("guard: fetch policy: %w", err)
	}
	var doc policy.Document
	if err := json.Unmarshal(raw, &doc); err != nil {
		return false, fmt.Errorf("guard: decode policy: %w", err)
	}
	if err := g.resolver.Install(doc); err != nil {
		return false, fmt.Errorf("guard: policy: %w", err)
	}
	tag := res.Header.Get("ETag")
	g.mu.Lock()
	g.etag = tag
	g.mu.Unlock()
	g.saveCache(ctx, raw, tag)
	return true, nil
}
