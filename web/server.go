// Package web serves Sluice's browser UI: sign-in and sessions, the operator
// dashboard under /admin, and (from routes_app.go) the developer portal. Pages
// are templ components from package views, enhanced with htmx; every form also
// works with full page loads.
package web

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/alerts"
	"github.com/sluicehq/sluice/internal/analytics"
	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/history"
	"github.com/sluicehq/sluice/internal/metering"
	"github.com/sluicehq/sluice/internal/optokens"
	"github.com/sluicehq/sluice/internal/orgs"
	"github.com/sluicehq/sluice/internal/pgsession"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/playground"
	"github.com/sluicehq/sluice/internal/quotas"
	"github.com/sluicehq/sluice/internal/requestlog"
	"github.com/sluicehq/sluice/internal/resets"
	"github.com/sluicehq/sluice/internal/seal"
	"github.com/sluicehq/sluice/internal/services"
	"github.com/sluicehq/sluice/internal/signin"
	"github.com/sluicehq/sluice/internal/sso"
	"github.com/sluicehq/sluice/internal/traffic"
	"github.com/sluicehq/sluice/internal/users"
)

// Deps is everything the UI needs. Logger, SessionSecret, Users and Limiter
// are required; the operator pages also need Pool, Plans, Keys and Usage.
type Deps struct {
	Logger *slog.Logger
	// SessionSecret keys the hash under which sessions are stored (in
	// Pool); at least 32 bytes. Changing it signs everyone out.
	SessionSecret []byte
	// Users authenticates sign-ins and loads the signed-in user per request.
	Users *users.Repo
	// Pool is the store of record: the audit log and the dashboard's usage
	// read model (which keys were used lately) are read from it.
	Pool  *pgxpool.Pool
	Plans *plans.Service
	Keys  *apikeys.Service
	// Limiter is Sluice's own engine; the sign-up form is rate limited with
	// it. (Failed sign-ins are counted in Pool: see package signin.)
	Limiter enforce.Store
	// Dashboard is the engine as the dashboards read it (the live views'
	// and usage pages' Peeks): with Redis, a store over a client of its
	// own, so dashboards never queue behind the request path's pipeline or
	// feed its circuit breaker. Nil means Limiter.
	Dashboard enforce.Store
	// Quotas is where operators' quota grants and resets go: the quota
	// ledger in the portal (as for the admin API), so a counter rebuilt
	// after a loss keeps them. Nil means Limiter when it can change quotas
	// (the memory store can); otherwise the controls answer 503.
	Quotas quotas.Adjuster
	// Usage reads the engine's usage series (both stores implement it);
	// with Redis, through the dashboards' client as well.
	Usage UsageReader
	// StreamsPerUser and StreamsMax cap the live streams (/app/stream,
	// /admin/live/stream) open at once per user and in all; beyond them a
	// stream is answered 429. Zero means DefaultStreamsPerUser and
	// DefaultStreamsMax.
	StreamsPerUser, StreamsMax int
	// Health lists the dependencies whose failure shows a banner on every
	// page (e.g. Postgres, Redis).
	Health []HealthCheck
	// TrustedProxies are the peers whose X-Forwarded-For and
	// X-Forwarded-Proto are believed.
	TrustedProxies []netip.Prefix
	// SignIn is how many failed sign-ins are tolerated; the zero value
	// means signin.DefaultPolicy(). The counts live in Pool.
	SignIn signin.Policy
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Regions, when set, puts the region mode and each region's traffic
	// on the usage overview; RegionUsage reads each peer region's usage
	// series by name (this region's is Usage).
	Regions     RegionSource
	RegionUsage map[string]UsageReader
	// Traffic, when set, is the recorded traffic the playground replays.
	Traffic *traffic.Recorder
	// Playground runs replays; share one *playground.Runner with the admin
	// API so that both count against one bound of replays at once. Nil
	// means a Runner of the UI's own.
	Playground Replayer
	// History, when set, reads the usage history (per minute and hour) and
	// the shadow tiers' would-be rejections; without it those pages 404.
	History *history.Reader
	// RequestLog, when set, reads the request log (/admin/requests,
	// /app/requests); without it those pages 404. RequestLogAdmitSample
	// (one admission in n is logged) and RequestLogRetention describe the
	// log on its pages.
	RequestLog            *requestlog.Reader
	RequestLogAdmitSample int
	RequestLogRetention   time.Duration
	// Analytics, when set, reads the rollups behind /admin/analytics and
	// /app/analytics (without it they 404); Headroom, when set, fills
	// their limit headroom through the engine's Peek.
	Analytics *analytics.Reader
	Headroom  *analytics.Headroom
	// UsageRecords, when set, serves /admin/usage-records.csv.
	UsageRecords *metering.Reader

	// Threshold alerts (/app/alerts). Alerts nil answers those pages 503.
	// AlertSender attempts a "send test event" at once (nil leaves it to
	// the background worker); AlertEmail says the portal can send email.
	Alerts      *alerts.Service
	AlertSender *alerts.Worker
	AlertEmail  bool

	// SSO, when set, offers "Sign in with SSO" through an OpenID Connect
	// provider (package sso); SSOPolicy says who may sign in with it, and
	// as what.
	SSO       *sso.Client
	SSOPolicy sso.Policy

	// Mailer, when set with PublicURL, sends the account emails: sign-up
	// confirmations and self-service password reset links. Without it the
	// portal sends none and its pages say so: sign-up makes the account at
	// once (unverified), and /password/forgot says to ask an operator.
	Mailer Mailer
	// PublicURL is the console's public base URL (PORTAL_PUBLIC_URL, e.g.
	// https://portal.example.com): the links in emails start with it, never
	// with a request's Host header, which whoever asks can choose.
	PublicURL string
	// Instances is how many portal instances share the Redis counters
	// (PORTAL_INSTANCES): the tier form states each tier's worst case with
	// it, and so do the generated docs. Zero means one.
	Instances int
	// ServiceURL is the base URL a service with an upstream is called
	// under through the reverse proxy, as the client of r (a request to
	// the console, reached at consoleBase) would call it; "" when it is
	// reachable nowhere. The service pages show it and the service's docs
	// address their examples to it. Nil: never reachable.
	ServiceURL func(r *http.Request, consoleBase string, svc services.Service) string
}

// Replayer runs playground replays, refusing with playground.ErrBusy when
// too many run at once; *playground.Runner is one.
type Replayer interface {
	Replay(ctx context.Context, sc playground.Scenario) (playground.Report, error)
}

// UsageReader reads the engine's admitted and rejected counts per subject,
// route and 10-second bucket since a time.
type UsageReader interface {
	Usage(ctx context.Context, subjects []string, since time.Time) ([]enforce.UsagePoint, error)
}

// HealthCheck is one dependency the banner reports on.
type HealthCheck struct {
	// Name is shown to the operator, e.g. "Postgres".
	Name  string
	Check func(ctx context.Context) error
}

// Server is the UI's http.Handler.
type Server struct {
	deps     Deps
	log      *slog.Logger
	now      func() time.Time
	sessions *pgsession.Store
	// sealer carries a new key's secret to the page that shows it once.
	sealer  seal.Box
	handler http.Handler
	health  healthCache
	usage   usageCache
	// throttle counts failed sign-ins; devices makes and checks the device
	// cookies that tell the owner's browser from a guesser's.
	throttle *signin.Throttle
	devices  signin.Devices
	// localLimiter counts sign-up attempts while the shared store is down.
	localLimiter *memstore.Store
	// services is over Deps.Pool (nil without one: the pages then 503).
	services *services.Repo
	// tokens manages operator API tokens (the bootstrap token is the
	// admin API's business, not the dashboard's).
	tokens *optokens.Store
	// ssoAccounts and ssoSealer serve sign-in with SSO (Deps.SSO).
	ssoAccounts *sso.Accounts
	ssoSealer   seal.Box
	// orgs are the organisations developers act in (Deps.Pool).
	orgs *orgs.Repo
	// csp is contentSecurityPolicy, with the provider's origin among the
	// form targets when SSO is on (ssoFormAction).
	csp string
	// resets makes and redeems one-time password reset links; selfResets
	// makes the shorter-lived ones a developer asks for by email.
	resets, selfResets *resets.Store
	// mailSlots bounds the emails sent in the background at once.
	mailSlots chan struct{}
	// dashboard peeks for the dashboards (Deps.Dashboard, else Limiter).
	dashboard enforce.Store
	// quotas grants and resets quotas (Deps.Quotas), the admin API's path.
	quotas   quotas.Service
	replayer Replayer
	streams  *streamGate
	shares   *viewShares
}

// New builds the UI from its dependencies. It panics on a missing required
// dependency, which is a wiring bug, not a runtime condition.
func New(deps Deps) *Server {
	if deps.Logger == nil || deps.Users == nil || deps.Limiter == nil {
		panic("web.New: Logger, Users and Limiter are required")
	}
	if deps.Pool == nil || deps.Plans == nil || deps.Keys == nil || deps.Usage == nil {
		panic("web.New: Pool, Plans, Keys and Usage are required")
	}
	if len(deps.SessionSecret) < 32 {
		panic("web.New: SessionSecret must be at least 32 bytes")
	}
	s := &Server{deps: deps, log: deps.Logger, now: deps.Now}
	if s.now == nil {
		s.now = time.Now
	}
	s.dashboard = deps.Dashboard
	if s.dashboard == nil {
		s.dashboard = deps.Limiter
	}
	s.quotas = quotas.Service{Pool: deps.Pool, Users: deps.Users, Plans: deps.Plans, Store: deps.Quotas}
	if adj, ok := deps.Limiter.(quotas.Adjuster); ok && deps.Quotas == nil {
		s.quotas.Store = adj
	}
	s.replayer = deps.Playground
	if s.replayer == nil {
		s.replayer = playground.NewRunner(playground.DefaultParallel)
	}
	s.mailSlots = make(chan struct{}, maxBackgroundMails)
	s.streams = newStreamGate(deps.StreamsPerUser, deps.StreamsMax)
	s.shares = newViewShares()
	s.sessions = newSessionStore(deps, s.now)
	s.sealer = newSecretSealer(deps.SessionSecret)
	if deps.Pool != nil {
		s.services = services.NewRepo(deps.Pool)
		s.tokens = optokens.NewStore(deps.Pool, "")
		s.resets = resets.NewStore(deps.Pool, 0, s.now)
		s.ssoAccounts = sso.NewAccounts(deps.Pool)
		s.orgs = orgs.NewRepo(deps.Pool, s.now)
		s.selfResets = resets.NewStore(deps.Pool, selfResetTTL, s.now)
	}
	s.ssoSealer = newSSOSealer(deps.SessionSecret)
	s.csp = contentSecurityPolicy
	if deps.SSO != nil {
		s.csp = ssoFormAction(contentSecurityPolicy, deps.SSO.Issuer())
	}
	policy := deps.SignIn
	if policy == (signin.Policy{}) {
		policy = signin.DefaultPolicy()
	}
	s.throttle = signin.New(deps.Pool, policy, s.now)
	s.devices = signin.NewDevices(deps.SessionSecret)
	s.localLimiter = memstore.New(memstore.Options{Now: s.now, DisableUsage: true})
	s.handler = s.routes()
	return s
}

// ServeHTTP serves the UI.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.handler.ServeHTTP(w, r)
}

// healthCache keeps the last health result for a couple of seconds so a page
// load does not ping every dependency.
type healthCache struct {
	mu      sync.Mutex
	at      time.Time
	failing []string
}

const healthTTL = 2 * time.Second

// failingDependencies names the dependencies that are down now; fresh
// skips the cached answer (after an unexpected failure, say).
func (s *Server) failingDependencies(ctx context.Context, fresh bool) []string {
	if len(s.deps.Health) == 0 {
		return nil
	}
	s.health.mu.Lock()
	defer s.health.mu.Unlock()
	now := s.now()
	if !fresh && !s.health.at.IsZero() && now.Sub(s.health.at) < healthTTL {
		return s.health.failing
	}
	ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	var failing []string
	for _, h := range s.deps.Health {
		if err := h.Check(ctx); err != nil {
			if !errors.Is(err, context.Canceled) {
				s.log.Warn("dependency unhealthy", "dependency", h.Name, "err", err)
			}
			failing = append(failing, h.Name)
		}
	}
	s.health.at, s.health.failing = now, failing
	return failing
}
