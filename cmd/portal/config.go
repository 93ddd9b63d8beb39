package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/mail"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/alerts"
	"github.com/sluicehq/sluice/internal/egress"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/httplimit"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/history"
	smtpmail "github.com/sluicehq/sluice/internal/mail"
	"github.com/sluicehq/sluice/internal/region"
	"github.com/sluicehq/sluice/internal/signin"
	"github.com/sluicehq/sluice/internal/tokenlimit"
	"github.com/sluicehq/sluice/internal/users"
)

// Config is everything the portal reads from its environment and flags.
// LoadConfig fills and validates it; every field has a usable default.
type Config struct {
	// Addr is the HTTP listen address (PORTAL_ADDR, -addr).
	Addr string
	// GRPCAddr is where Envoy's rate-limit service listens (PORTAL_GRPC_ADDR,
	// -grpc-addr); empty, the default, serves no gRPC. Without GRPCToken it
	// must be a loopback address (a bare port means 127.0.0.1).
	GRPCAddr string
	// GRPCToken, when set, is required of every gRPC call as metadata
	// "authorization: Bearer <token>" (PORTAL_GRPC_TOKEN).
	GRPCToken string
	// DatabaseURL is the Postgres store of record (DATABASE_URL,
	// -database-url); empty runs an embedded Postgres in DataDir.
	DatabaseURL string
	// RedisURL holds the shared rate-limit counters (REDIS_URL, -redis-url);
	// empty keeps them in this process's memory.
	RedisURL string
	// DataDir holds the embedded Postgres cluster and the generated session
	// secret (PORTAL_DATA_DIR, -data-dir).
	DataDir string
	// AdminEmail and AdminPassword name the bootstrap operator
	// (PORTAL_ADMIN_EMAIL, PORTAL_ADMIN_PASSWORD). Without a password, one
	// is generated on first start and printed once.
	AdminEmail    string
	AdminPassword string
	// AdminToken, when set, is accepted as an operator bearer token on the
	// admin API (PORTAL_ADMIN_TOKEN), for automation before any token has
	// been created in the UI.
	AdminToken string
	// SessionSecret signs and encrypts browser sessions
	// (PORTAL_SESSION_SECRET); nil until run loads or generates it in
	// DataDir.
	SessionSecret []byte
	// TrustedProxies are the addresses whose X-Forwarded-For is believed
	// (PORTAL_TRUSTED_PROXIES).
	TrustedProxies []netip.Prefix
	// RedisFailureMode is what the engine does while Redis is unreachable
	// (PORTAL_REDIS_FAILURE_MODE).
	RedisFailureMode enforce.FailureMode
	// Instances is how many portal instances share the Redis counters
	// (PORTAL_INSTANCES); FailureLocal divides each limit by it.
	Instances int
	// RedisPrefix starts every Redis key the portal writes
	// (PORTAL_REDIS_PREFIX), so portals that share one Redis but not their
	// plans and keys (staging and production, parallel tests) keep apart.
	// Every instance of one portal must use the same prefix.
	RedisPrefix string
	// RedisTimeout bounds one rate-limit decision's wait for Redis
	// (PORTAL_REDIS_TIMEOUT); past it the failure mode decides, and an
	// outage (failures dominating a window, see failover.Store) opens
	// the circuit breaker.
	RedisTimeout time.Duration
	// ConcurrencyLease is how long a concurrency tier's slot is held
	// without renewal (PORTAL_CONCURRENCY_LEASE): what a crashed instance
	// leaks at most, and how long a slot taken through /v1/check lasts
	// unless released. Running requests renew every half lease.
	ConcurrencyLease time.Duration
	// RedisNearCache is how many over-limit (subject, route) rejections each
	// instance remembers until they could turn into admissions
	// (PORTAL_REDIS_NEAR_CACHE), so a caller hammering past its limit costs
	// no Redis call; 0 turns it off.
	RedisNearCache int
	// LastUsedInterval is how often keys' last use is written to Postgres in
	// one batch (PORTAL_LAST_USED_INTERVAL); the dashboard's usage overview
	// lists a newly used key at most this late.
	LastUsedInterval time.Duration
	// LogJSON switches logs from text to JSON (PORTAL_LOG_FORMAT, -log-json).
	LogJSON bool
	// LogLevel is the minimum level logged (PORTAL_LOG_LEVEL).
	LogLevel string
	// Migrate applies pending migrations at start (PORTAL_MIGRATE,
	// -migrate); when false the portal refuses to start on an older schema.
	Migrate bool
	// Demo seeds the demo plans on first start (PORTAL_DEMO, -no-demo).
	Demo bool
	// ShutdownTimeout bounds the graceful shutdown (PORTAL_SHUTDOWN_TIMEOUT).
	ShutdownTimeout time.Duration
	// MetricsAddr is the listen address of GET /metrics alone
	// (PORTAL_METRICS_ADDR): 127.0.0.1:9464 by default, loopback only; empty
	// (the setting "off", or "public") serves it on no listener of its own.
	MetricsAddr string
	// MetricsPublic serves GET /metrics on Addr, behind MetricsToken
	// (PORTAL_METRICS_ADDR=public).
	MetricsPublic bool
	// ProxyAddr, when set, is the reverse proxy's own listen address
	// (PORTAL_PROXY_ADDR): services with an upstream are served there, an
	// origin apart from the console's; empty serves them only on their host
	// names. ProxyURL is that listener's public base URL (PORTAL_PROXY_URL),
	// empty to derive it from the console's host name and the port.
	ProxyAddr, ProxyURL string
	// MetricsToken, when set, is required as a bearer token on GET /metrics
	// (PORTAL_METRICS_TOKEN).
	MetricsToken string
	// DebugAddr, when set, serves Go's profiler (/debug/pprof/) on its own
	// listen address, never on Addr (PORTAL_DEBUG_ADDR); empty, the default,
	// serves it nowhere.
	DebugAddr string
	// TokenFailures and TokenRequests are how many failed authentications
	// and how many requests one client address may make per minute at the
	// admin API and at the policy feed, each (package tokenlimit):
	// PORTAL_TOKEN_FAILURES_PER_MINUTE, PORTAL_TOKEN_REQUESTS_PER_MINUTE.
	TokenFailures, TokenRequests int
	// SignIn is how many failed sign-ins are tolerated
	// (PORTAL_SIGNIN_ADDRESS_FAILURES, PORTAL_SIGNIN_PAIR_FAILURES,
	// PORTAL_SIGNIN_WINDOW, PORTAL_SIGNIN_ACCOUNT_FREE_FAILURES,
	// PORTAL_SIGNIN_ACCOUNT_MAX_DELAY).
	SignIn signin.Policy
	// AnonPrefixes are the address blocks anonymous callers are limited by
	// (PORTAL_ANON_IPV4_PREFIX, PORTAL_ANON_IPV6_PREFIX).
	AnonPrefixes enforce.AddressPrefixes
	// KeysPerDeveloper caps a developer's active keys
	// (PORTAL_KEYS_PER_DEVELOPER).
	KeysPerDeveloper int
	// MemoryMaxSubjects bounds the subjects the memory store holds
	// (PORTAL_MEMORY_MAX_SUBJECTS).
	MemoryMaxSubjects int
	// StreamsPerUser and StreamsMax cap the live dashboard streams
	// (PORTAL_STREAMS_PER_USER, PORTAL_STREAMS_MAX).
	StreamsPerUser, StreamsMax int
	// DashboardRedisTimeout and DashboardRedisPool shape the dashboards' own
	// Redis client, kept apart from the request path's
	// (PORTAL_DASHBOARD_REDIS_TIMEOUT, PORTAL_DASHBOARD_REDIS_POOL).
	DashboardRedisTimeout time.Duration
	DashboardRedisPool    int
	// Region is how this instance shares limits with other regions, each
	// with its own Redis: PORTAL_REGION (its name), PORTAL_REGIONS (every
	// region and its weight), PORTAL_REGION_MODE and
	// PORTAL_REGION_SYNC_INTERVAL. Mode shared (the default) is one Redis
	// for every region.
	Region region.Config
	// PeerRedisURLs are the other regions' Redis URLs, for sync mode
	// (PORTAL_PEER_REDIS_URLS).
	PeerRedisURLs []region.Peer
	// TrafficRecording keeps the last 24 hours of arrivals for the
	// playground (PORTAL_TRAFFIC_RECORDING, -traffic-recording).
	TrafficRecording bool

	// HistoryFlushInterval is how often each instance adds its tally of
	// decisions to the usage history in Postgres
	// (PORTAL_HISTORY_FLUSH_INTERVAL); the history's charts are at most
	// this late.
	HistoryFlushInterval time.Duration

	// Email and alerts. SMTPURL, when set, is the SMTP server the portal
	// sends its email through (PORTAL_SMTP_URL): smtp://user:pass@host:port
	// (STARTTLS when offered) or smtps://. SMTPFrom is their From address
	// (PORTAL_SMTP_FROM). AlertInterval is how often the alert evaluator
	// reads usage (PORTAL_ALERT_INTERVAL).
	SMTPURL  string
	SMTPFrom string
	// PublicURL is the console's public base URL (PORTAL_PUBLIC_URL): the
	// links in the account emails start with it. The account emails
	// (sign-up confirmation, reset links) need it and SMTPURL both.
	PublicURL     string
	AlertInterval time.Duration
	// OutboundAllow opens private receivers to outbound requests
	// (PORTAL_OUTBOUND_ALLOW): webhooks reach public addresses only,
	// unless listed here (see package egress).
	OutboundAllow egress.Allowlist

	// Usage: request log, analytics, metering, key verification (config_usage.go).
	Usage usageConfig
	// SSO: OpenID Connect sign-in (config_sso.go); Tracing: OpenTelemetry (config_tracing.go).
	SSO     ssoConfig
	Tracing tracingConfig
}

// intSetting stores a whole number from lo to hi in the field field returns.
func intSetting(lo, hi int, field func(c *Config) *int) func(c *Config, v string) error {
	return func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < lo || n > hi {
			return errors.New("out of range")
		}
		*field(c) = n
		return nil
	}
}

// defaultMetricsAddr serves /metrics on loopback only unless told otherwise:
// its series name routes, plans and failure counts that are nobody else's
// business.
const defaultMetricsAddr = "127.0.0.1:9464"

// defaultAdminEmail is the bootstrap operator's email when none is set.
const defaultAdminEmail = "admin@localhost"

// setting is one configuration variable: its environment name, its flag, and
// how a raw value is checked and stored.
type setting struct {
	env, flag string
	// def is the default as it would be written in the environment.
	def string
	// accepts completes "PORTAL_X=...: want <accepts>" in errors and usage.
	accepts string
	// secret values are never echoed in errors.
	secret bool
	// boolFlag makes "-flag" alone mean "true".
	boolFlag bool
	set      func(c *Config, v string) error
}

// settings lists every variable, in the order of the README's table.
func settings(getenv func(string) string) []setting {
	defSignIn := signin.DefaultPolicy()
	return append([]setting{
		{env: "PORTAL_ADDR", flag: "addr", def: ":8080", accepts: "a listen address host:port, e.g. :8080 or 127.0.0.1:8080 (port 0 picks a free port)",
			set: func(c *Config, v string) error { c.Addr = v; return checkAddr(v) }},
		{env: "PORTAL_GRPC_ADDR", flag: "grpc-addr", accepts: "a listen address host:port for Envoy's rate-limit service over gRPC, e.g. 127.0.0.1:8081 (a bare :8081 listens on loopback; other hosts need PORTAL_GRPC_TOKEN), or empty for none",
			set: func(c *Config, v string) error {
				c.GRPCAddr = v
				if v == "" {
					return nil
				}
				return checkAddr(v)
			}},
		{env: "DATABASE_URL", flag: "database-url", accepts: "a postgres://user:pass@host:5432/db URL, or empty for the embedded Postgres", secret: true,
			set: func(c *Config, v string) error {
				c.DatabaseURL = v
				if v == "" {
					return nil
				}
				if _, err := pgxpool.ParseConfig(v); err != nil {
					return errors.New("not a valid URL")
				}
				return nil
			}},
		{env: "REDIS_URL", flag: "redis-url", accepts: "redis:// or rediss:// (with master_name= for Sentinel, addr= or the redis+cluster:// scheme for Cluster), or empty for in-memory counters", secret: true,
			set: func(c *Config, v string) error {
				c.RedisURL = v
				if v == "" {
					return nil
				}
				_, _, err := redisOptions(v)
				return err
			}},
		{env: "PORTAL_DATA_DIR", flag: "data-dir", def: defaultDataDir(getenv), accepts: "a directory the portal can write",
			set: func(c *Config, v string) error {
				if v == "" {
					return errors.New("empty")
				}
				c.DataDir = v
				return nil
			}},
		{env: "PORTAL_ADMIN_EMAIL", flag: "admin-email", def: defaultAdminEmail, accepts: "the bootstrap operator's email address",
			set: func(c *Config, v string) error {
				c.AdminEmail = v
				if msg := users.ValidateEmail(v); msg != "" {
					return errors.New(msg)
				}
				return nil
			}},
		{env: "PORTAL_ADMIN_PASSWORD", flag: "admin-password", accepts: "at least 12 characters, not the email; empty generates one", secret: true,
			set: func(c *Config, v string) error { c.AdminPassword = v; return nil }},
		{env: "PORTAL_ADMIN_TOKEN", flag: "admin-token", accepts: "at least 32 characters, or empty", secret: true,
			set: func(c *Config, v string) error {
				c.AdminToken = v
				if v != "" && len(v) < 32 {
					return fmt.Errorf("%d characters", len(v))
				}
				return nil
			}},
		{env: "PORTAL_SESSION_SECRET", flag: "session-secret", accepts: "at least 32 bytes, or empty to generate one in the data dir", secret: true,
			set: func(c *Config, v string) error {
				if v == "" {
					return nil
				}
				if len(v) < 32 {
					return fmt.Errorf("%d bytes", len(v))
				}
				c.SessionSecret = []byte(v)
				return nil
			}},
		{env: "PORTAL_TRUSTED_PROXIES", flag: "trusted-proxies", accepts: "a comma-separated list of IP addresses or CIDR prefixes, e.g. 10.0.0.0/8,192.168.1.1",
			set: func(c *Config, v string) error {
				var err error
				c.TrustedProxies, err = httplimit.ParseTrustedProxies(v)
				return err
			}},
		{env: "PORTAL_REDIS_FAILURE_MODE", flag: "redis-failure-mode", def: string(enforce.FailLocal),
			accepts: "local (per-instance memory counters, limits divided by PORTAL_INSTANCES), open (admit, marked degraded) or closed (503)",
			set: func(c *Config, v string) error {
				var err error
				if c.RedisFailureMode, err = enforce.ParseFailureMode(v); err != nil {
					return errors.New("unknown mode")
				}
				return nil
			}},
		{env: "PORTAL_INSTANCES", flag: "instances", def: "1", accepts: "a whole number from 1 to 1000",
			set: func(c *Config, v string) error {
				n, err := strconv.Atoi(v)
				if err != nil || n < 1 || n > 1000 {
					return errors.New("out of range")
				}
				c.Instances = n
				return nil
			}},
		{env: "PORTAL_REDIS_PREFIX", flag: "redis-prefix", def: "sluice:", accepts: "1 to 64 characters without spaces or braces, e.g. sluice:staging:",
			set: func(c *Config, v string) error {
				c.RedisPrefix = v
				switch {
				case v == "" || len(v) > 64:
					return errors.New("length out of range")
				case strings.ContainsAny(v, "{} \t\r\n"):
					return errors.New("contains a brace or a space")
				}
				return nil
			}},
		{env: "PORTAL_REDIS_TIMEOUT", flag: "redis-timeout", def: enforce.DefaultStoreTimeout.String(), accepts: "a duration from 1ms to 10s, e.g. 1s",
			set: func(c *Config, v string) error {
				d, err := time.ParseDuration(v)
				if err != nil || d < time.Millisecond || d > 10*time.Second {
					return errors.New("out of range")
				}
				c.RedisTimeout = d
				return nil
			}},
		{env: "PORTAL_CONCURRENCY_LEASE", flag: "concurrency-lease", def: enforce.DefaultSlotLease.String(), accepts: "a duration from 1s to 1h, e.g. 60s",
			set: func(c *Config, v string) error {
				d, err := time.ParseDuration(v)
				if err != nil || d < time.Second || d > time.Hour {
					return errors.New("out of range")
				}
				c.ConcurrencyLease = d
				return nil
			}},
		{env: "PORTAL_REDIS_NEAR_CACHE", flag: "redis-near-cache", def: "10000", accepts: "a whole number from 0 (off) to 1000000",
			set: func(c *Config, v string) error {
				n, err := strconv.Atoi(v)
				if err != nil || n < 0 || n > 1_000_000 {
					return errors.New("out of range")
				}
				c.RedisNearCache = n
				return nil
			}},
		{env: "PORTAL_LAST_USED_INTERVAL", flag: "last-used-interval", def: "1m", accepts: "a duration from 1s to 1h, e.g. 1m",
			set: func(c *Config, v string) error {
				d, err := time.ParseDuration(v)
				if err != nil || d < time.Second || d > time.Hour {
					return errors.New("out of range")
				}
				c.LastUsedInterval = d
				return nil
			}},
		{env: "PORTAL_ANON_IPV4_PREFIX", flag: "anon-ipv4-prefix", def: "32", accepts: "a prefix length from 1 to 32: anonymous IPv4 callers in one block share one budget",
			set: intSetting(1, 32, func(c *Config) *int { return &c.AnonPrefixes.IPv4 })},
		{env: "PORTAL_ANON_IPV6_PREFIX", flag: "anon-ipv6-prefix", def: "64", accepts: "a prefix length from 1 to 128: anonymous IPv6 callers in one block share one budget",
			set: intSetting(1, 128, func(c *Config) *int { return &c.AnonPrefixes.IPv6 })},
		{env: "PORTAL_KEYS_PER_DEVELOPER", flag: "keys-per-developer", def: "20", accepts: "a whole number from 1 to 10000: the most active keys one developer may hold",
			set: intSetting(1, 10000, func(c *Config) *int { return &c.KeysPerDeveloper })},
		{env: "PORTAL_MEMORY_MAX_SUBJECTS", flag: "memory-max-subjects", def: strconv.Itoa(memstore.DefaultMaxSubjects), accepts: "a whole number from 1000 to 100000000: the most subjects the in-memory counters hold",
			set: intSetting(1000, 100_000_000, func(c *Config) *int { return &c.MemoryMaxSubjects })},
		{env: "PORTAL_STREAMS_PER_USER", flag: "streams-per-user", def: "3", accepts: "a whole number from 1 to 100: live dashboard streams one user may hold open",
			set: intSetting(1, 100, func(c *Config) *int { return &c.StreamsPerUser })},
		{env: "PORTAL_STREAMS_MAX", flag: "streams-max", def: "256", accepts: "a whole number from 1 to 100000: live dashboard streams open at once on this instance",
			set: intSetting(1, 100_000, func(c *Config) *int { return &c.StreamsMax })},
		{env: "PORTAL_DASHBOARD_REDIS_TIMEOUT", flag: "dashboard-redis-timeout", def: "1s", accepts: "a duration from 10ms to 30s: how long a dashboard read may wait for Redis",
			set: func(c *Config, v string) error {
				d, err := time.ParseDuration(v)
				if err != nil || d < 10*time.Millisecond || d > 30*time.Second {
					return errors.New("out of range")
				}
				c.DashboardRedisTimeout = d
				return nil
			}},
		{env: "PORTAL_DASHBOARD_REDIS_POOL", flag: "dashboard-redis-pool", def: "4", accepts: "a whole number from 1 to 256: connections of the dashboards' own Redis client",
			set: intSetting(1, 256, func(c *Config) *int { return &c.DashboardRedisPool })},
		{env: "PORTAL_LOG_FORMAT", flag: "log-format", def: "text", accepts: "text or json",
			set: func(c *Config, v string) error {
				c.LogJSON = v == "json"
				if v != "text" && v != "json" {
					return errors.New("unknown format")
				}
				return nil
			}},
		{env: "PORTAL_LOG_LEVEL", flag: "log-level", def: "info", accepts: "debug, info, warn or error",
			set: func(c *Config, v string) error {
				c.LogLevel = v
				switch v {
				case "debug", "info", "warn", "error":
					return nil
				}
				return errors.New("unknown level")
			}},
		{env: "PORTAL_MIGRATE", flag: "migrate", def: "true", accepts: "true or false", boolFlag: true,
			set: func(c *Config, v string) error {
				var err error
				c.Migrate, err = strconv.ParseBool(v)
				return err
			}},
		{env: "PORTAL_DEMO", flag: "demo", def: "true", accepts: "true or false", boolFlag: true,
			set: func(c *Config, v string) error {
				var err error
				c.Demo, err = strconv.ParseBool(v)
				return err
			}},
		{env: "PORTAL_REGION", flag: "region", accepts: "this instance's region name (letters, digits, '-', '_'), listed in PORTAL_REGIONS; empty for one region",
			set: func(c *Config, v string) error {
				c.Region.Region = v
				if v != "" {
					if _, err := region.ParseRegions(v); err != nil || strings.ContainsAny(v, ",=") {
						return errors.New("not a region name")
					}
				}
				return nil
			}},
		{env: "PORTAL_REGIONS", flag: "regions", accepts: "every region with its weight, e.g. eu=2,us=1 (weights default to 1)",
			set: func(c *Config, v string) error {
				if v == "" {
					return nil
				}
				var err error
				c.Region.Regions, err = region.ParseRegions(v)
				return err
			}},
		{env: "PORTAL_REGION_MODE", flag: "region-mode", def: string(region.Shared),
			accepts: "shared (one Redis for every region), share (each region enforces its weighted share on its own Redis) or sync (own Redis plus the peers' published consumption)",
			set: func(c *Config, v string) error {
				c.Region.Mode = region.Mode(v)
				if !c.Region.Mode.Valid() {
					return errors.New("unknown mode")
				}
				return nil
			}},
		{env: "PORTAL_PEER_REDIS_URLS", flag: "peer-redis-urls", accepts: "for sync (and, optional, for share's dashboard): every other region's Redis, e.g. us=redis://us-redis:6379,ap=redis://ap-redis:6379", secret: true,
			set: func(c *Config, v string) error {
				peers, err := region.ParsePeers(v)
				if err != nil {
					return errors.New("not a list of region=URL")
				}
				for _, p := range peers {
					if _, _, err := redisOptions(p.URL); err != nil {
						return fmt.Errorf("region %s: %v", p.Name, err)
					}
				}
				c.PeerRedisURLs = peers
				return nil
			}},
		{env: "PORTAL_REGION_SYNC_INTERVAL", flag: "region-sync-interval", def: region.DefaultInterval.String(), accepts: "a duration from 10ms to 1m, e.g. 1s",
			set: func(c *Config, v string) error {
				d, err := time.ParseDuration(v)
				if err != nil || d < 10*time.Millisecond || d > time.Minute {
					return errors.New("out of range")
				}
				c.Region.Interval = d
				return nil
			}},
		{env: "PORTAL_TRAFFIC_RECORDING", flag: "traffic-recording", def: "true", accepts: "true or false", boolFlag: true,
			set: func(c *Config, v string) error {
				var err error
				c.TrafficRecording, err = strconv.ParseBool(v)
				return err
			}},
		// Usage history (package history).
		{env: "PORTAL_HISTORY_FLUSH_INTERVAL", flag: "history-flush-interval", def: history.DefaultFlushInterval.String(), accepts: "a duration from 1s to 5m, e.g. 15s",
			set: func(c *Config, v string) error {
				d, err := time.ParseDuration(v)
				if err != nil || d < time.Second || d > 5*time.Minute {
					return errors.New("out of range")
				}
				c.HistoryFlushInterval = d
				return nil
			}},
		// Threshold alerts (issue 12, item 5).
		{env: "PORTAL_ALERT_INTERVAL", flag: "alert-interval", def: alerts.DefaultInterval.String(), accepts: "a duration from 100ms to 10m: how often usage is checked against developers' alert thresholds, e.g. 5s",
			set: func(c *Config, v string) error {
				return setDuration(&c.AlertInterval, v, 100*time.Millisecond, 10*time.Minute)
			}},
		{env: "PORTAL_SMTP_URL", flag: "smtp-url", accepts: "smtp://user:pass@host:587 (STARTTLS when the server offers it) or smtps://user:pass@host:465: the portal then sends email (sign-up confirmation, password reset links, key expiry notices, alerts); empty for none", secret: true,
			set: func(c *Config, v string) error {
				c.SMTPURL = v
				if v == "" {
					return nil
				}
				_, err := smtpmail.New(v, "sluice@localhost", smtpmail.Options{})
				return err
			}},
		{env: "PORTAL_SMTP_FROM", flag: "smtp-from", def: "sluice@localhost", accepts: "the From address of the portal's emails, e.g. sluice@example.com",
			set: func(c *Config, v string) error {
				a, err := mail.ParseAddress(v)
				if err != nil {
					return errors.New("not an email address")
				}
				c.SMTPFrom = a.Address
				return nil
			}},
		{env: "PORTAL_OUTBOUND_ALLOW", flag: "outbound-allow",
			accepts: "a comma-separated list of CIDR prefixes, IP addresses or host names that webhooks may reach although private, e.g. 10.0.0.0/8,hooks.internal; empty for public addresses only",
			set: func(c *Config, v string) error {
				var err error
				c.OutboundAllow, err = egress.ParseAllowlist(v)
				return err
			}},
		{env: "PORTAL_SHUTDOWN_TIMEOUT", flag: "shutdown-timeout", def: "15s", accepts: "a duration from 1s to 10m, e.g. 15s",
			set: func(c *Config, v string) error {
				d, err := time.ParseDuration(v)
				if err != nil || d < time.Second || d > 10*time.Minute {
					return errors.New("out of range")
				}
				c.ShutdownTimeout = d
				return nil
			}},
		{env: "PORTAL_METRICS_ADDR", flag: "metrics-addr", def: defaultMetricsAddr,
			accepts: "a listen address host:port for /metrics alone (the default listens on loopback only; e.g. :9464 for a monitoring network), off for no /metrics, or public to serve it on PORTAL_ADDR behind PORTAL_METRICS_TOKEN",
			set: func(c *Config, v string) error {
				switch v {
				case "off":
					return nil
				case "public":
					c.MetricsPublic = true
					return nil
				}
				c.MetricsAddr = v
				return checkAddr(v)
			}},
		{env: "PORTAL_PROXY_ADDR", flag: "proxy-addr", accepts: "a listen address host:port for the reverse proxy alone, e.g. :8090, or empty to serve proxied services only on their host names",
			set: func(c *Config, v string) error {
				c.ProxyAddr = v
				if v == "" {
					return nil
				}
				return checkAddr(v)
			}},
		{env: "PORTAL_PUBLIC_URL", flag: "public-url", accepts: "the console's public base URL, e.g. https://portal.example.com, which the links in emails start with; with PORTAL_SMTP_URL it turns on sign-up confirmation and reset links by email",
			set: func(c *Config, v string) error { c.PublicURL = strings.TrimSuffix(v, "/"); return checkProxyURL(v) }},
		{env: "PORTAL_PROXY_URL", flag: "proxy-url", accepts: "the public base URL of PORTAL_PROXY_ADDR, e.g. https://api.example.com, or empty for http:// the console's host name and the proxy's port",
			set: func(c *Config, v string) error { c.ProxyURL = v; return checkProxyURL(v) }},
		{env: "PORTAL_METRICS_TOKEN", flag: "metrics-token", accepts: "at least 32 characters, required as a bearer token on /metrics, or empty for none", secret: true,
			set: func(c *Config, v string) error {
				c.MetricsToken = v
				if v != "" && len(v) < 32 {
					return fmt.Errorf("%d characters", len(v))
				}
				return nil
			}},
		{env: "PORTAL_DEBUG_ADDR", flag: "debug-addr", accepts: "a listen address host:port for /debug/pprof/ alone, e.g. 127.0.0.1:6060, or empty for none (it has no authentication: bind it to loopback)",
			set: func(c *Config, v string) error {
				c.DebugAddr = v
				if v == "" {
					return nil
				}
				return checkAddr(v)
			}},
		{env: "PORTAL_GRPC_TOKEN", flag: "grpc-token", accepts: "at least 32 characters, required of Envoy as gRPC metadata \"authorization: Bearer <token>\", or empty to serve loopback only", secret: true,
			set: func(c *Config, v string) error {
				c.GRPCToken = v
				if v != "" && len(v) < 32 {
					return fmt.Errorf("%d characters", len(v))
				}
				return nil
			}},
		{env: "PORTAL_TOKEN_FAILURES_PER_MINUTE", flag: "token-failures-per-minute", def: strconv.Itoa(tokenlimit.DefaultFailures),
			accepts: "a whole number from 1 to 100000: failed token authentications one client address may make per minute at the admin API and at /v1/policy, each",
			set:     func(c *Config, v string) error { return setCount(&c.TokenFailures, v) }},
		{env: "PORTAL_TOKEN_REQUESTS_PER_MINUTE", flag: "token-requests-per-minute", def: strconv.Itoa(tokenlimit.DefaultRequests),
			accepts: "a whole number from 1 to 100000: requests one client address may make per minute to the admin API and to /v1/policy, each",
			set:     func(c *Config, v string) error { return setCount(&c.TokenRequests, v) }},
		{env: "PORTAL_SIGNIN_ADDRESS_FAILURES", flag: "signin-address-failures", def: strconv.Itoa(defSignIn.AddressFailures),
			accepts: "a whole number from 1 to 100000: failed sign-ins one address may make per PORTAL_SIGNIN_WINDOW, across accounts",
			set:     func(c *Config, v string) error { return setCount(&c.SignIn.AddressFailures, v) }},
		{env: "PORTAL_SIGNIN_PAIR_FAILURES", flag: "signin-pair-failures", def: strconv.Itoa(defSignIn.PairFailures),
			accepts: "a whole number from 1 to 100000: failed sign-ins one address may make on one account per PORTAL_SIGNIN_WINDOW",
			set:     func(c *Config, v string) error { return setCount(&c.SignIn.PairFailures, v) }},
		{env: "PORTAL_SIGNIN_WINDOW", flag: "signin-window", def: defSignIn.Window.String(), accepts: "a duration from 1s to 24h, e.g. 15m",
			set: func(c *Config, v string) error { return setDuration(&c.SignIn.Window, v, time.Second, 24*time.Hour) }},
		{env: "PORTAL_SIGNIN_ACCOUNT_FREE_FAILURES", flag: "signin-account-free-failures", def: strconv.Itoa(defSignIn.AccountFreeFailures),
			accepts: "a whole number from 1 to 100000: failures on one account, from any address, before its attempts are spaced out",
			set:     func(c *Config, v string) error { return setCount(&c.SignIn.AccountFreeFailures, v) }},
		{env: "PORTAL_SIGNIN_ACCOUNT_MAX_DELAY", flag: "signin-account-max-delay", def: defSignIn.AccountMaxDelay.String(),
			accepts: "a duration from 1s to 1h: the cap of the doubling wait between attempts on a guessed account, e.g. 1m",
			set: func(c *Config, v string) error {
				return setDuration(&c.SignIn.AccountMaxDelay, v, time.Second, time.Hour)
			}},
	}, append(usageSettings(), append(ssoSettings(), tracingSettings(getenv)...)...)...)
}

// setCount stores a whole number from 1 to 100000.
func setCount(dst *int, v string) error {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 100_000 {
		return errors.New("out of range")
	}
	*dst = n
	return nil
}

// setDuration stores a duration within [lo, hi].
func setDuration(dst *time.Duration, v string, lo, hi time.Duration) error {
	d, err := time.ParseDuration(v)
	if err != nil || d < lo || d > hi {
		return errors.New("out of range")
	}
	*dst = d
	return nil
}

// rawValue is a flag.Value holding a setting's raw text, so flags and the
// environment go through the same validation.
type rawValue struct {
	s        *string
	boolFlag bool
}

func (r rawValue) String() string {
	if r.s == nil {
		return ""
	}
	return *r.s
}
func (r rawValue) Set(v string) error { *r.s = v; return nil }
func (r rawValue) IsBoolFlag() bool   { return r.boolFlag }

// LoadConfig reads the environment through getenv, lets flags in args
// override it, and validates the result. It returns the arguments left after
// the flags. Every invalid setting is reported, one line each, naming the
// variable and what it accepts; errors.Is(err, flag.ErrHelp) after -h.
func LoadConfig(args []string, getenv func(string) string, usage io.Writer) (Config, []string, error) {
	all := settings(getenv)
	raw := make([]string, len(all))
	fs := flag.NewFlagSet("portal", flag.ContinueOnError)
	fs.SetOutput(usage)
	for i, s := range all {
		raw[i] = s.def
		if v := getenv(s.env); v != "" {
			raw[i] = v
		}
		fs.Var(rawValue{s: &raw[i], boolFlag: s.boolFlag}, s.flag, fmt.Sprintf("%s: %s (default %q)", s.env, s.accepts, s.def))
	}
	index := func(env string) int {
		for i, s := range all {
			if s.env == env {
				return i
			}
		}
		panic("no setting " + env)
	}
	logFormat, demo := &raw[index("PORTAL_LOG_FORMAT")], &raw[index("PORTAL_DEMO")]
	fs.BoolFunc("log-json", "log JSON (same as -log-format=json)", func(string) error { *logFormat = "json"; return nil })
	fs.BoolFunc("no-demo", "do not seed the demo plans (same as -demo=false)", func(string) error { *demo = "false"; return nil })
	fs.Usage = func() {
		fmt.Fprintf(usage, "Usage: portal [flags]\n       portal migrate [flags] up | down [N|all] | version | force V\n       portal healthcheck [flags]\n\nEvery flag mirrors an environment variable; the flag wins.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return Config{}, nil, err
	}

	var cfg Config
	var errs []error
	for i, s := range all {
		if err := s.set(&cfg, raw[i]); err != nil {
			shown := fmt.Sprintf("%q", raw[i])
			if s.secret {
				shown = "(value hidden)"
			}
			errs = append(errs, fmt.Errorf("invalid %s (-%s) %s: %v; want %s", s.env, s.flag, shown, err, s.accepts))
		}
	}
	if cfg.AdminPassword != "" {
		if fe := users.ValidateSignup(cfg.AdminEmail, cfg.AdminPassword); fe["password"] != "" {
			errs = append(errs, fmt.Errorf("invalid PORTAL_ADMIN_PASSWORD (-admin-password) (value hidden): %s; want %s",
				fe["password"], all[index("PORTAL_ADMIN_PASSWORD")].accepts))
		}
	}
	// The profiler must never share the public listener (or /metrics');
	// port 0 picks a fresh port for each, so equal text is not the same
	// address there.
	if _, p, _ := net.SplitHostPort(cfg.DebugAddr); p != "0" && cfg.DebugAddr != "" &&
		(cfg.DebugAddr == cfg.Addr || cfg.DebugAddr == cfg.MetricsAddr) {
		errs = append(errs, fmt.Errorf("invalid PORTAL_DEBUG_ADDR (-debug-addr) %q: the same as PORTAL_ADDR or PORTAL_METRICS_ADDR; want %s",
			cfg.DebugAddr, all[index("PORTAL_DEBUG_ADDR")].accepts))
	}
	if cfg.MetricsPublic && cfg.MetricsToken == "" {
		errs = append(errs, errors.New("invalid PORTAL_METRICS_ADDR (-metrics-addr) \"public\": needs PORTAL_METRICS_TOKEN, or the metrics of the portal are anyone's; set a token, or a listen address such as :9464"))
	}
	if err := checkGRPCAddr(&cfg); err != nil {
		errs = append(errs, err)
	}
	if err := checkProxyAddr(cfg); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, nil, err
	}
	if err := checkRegions(&cfg); err != nil {
		return Config{}, nil, err
	}
	if err := errors.Join(cfg.Usage.check(), cfg.SSO.check()); err != nil {
		return Config{}, nil, err
	}
	return cfg, fs.Args(), nil
}

// checkRegions checks that the region settings agree with each other, in
// one line naming the variable to fix.
func checkRegions(c *Config) error {
	r := &c.Region
	if r.Mode == region.Shared {
		if len(c.PeerRedisURLs) > 0 {
			return errors.New("invalid PORTAL_PEER_REDIS_URLS (-peer-redis-urls): shared mode has no peers; set PORTAL_REGION_MODE to share or sync, or unset it")
		}
		return r.Validate(nil)
	}
	switch {
	case c.RedisURL == "":
		return fmt.Errorf("invalid PORTAL_REGION_MODE (-region-mode) %q: needs REDIS_URL, this region's own Redis", r.Mode)
	case r.Region == "":
		return fmt.Errorf("invalid PORTAL_REGION (-region) \"\": mode %s needs this instance's region name", r.Mode)
	case len(r.Regions) == 0:
		return fmt.Errorf("invalid PORTAL_REGIONS (-regions) \"\": mode %s needs every region, e.g. eu=2,us=1", r.Mode)
	}
	names := make([]string, len(c.PeerRedisURLs))
	for i, p := range c.PeerRedisURLs {
		names[i] = p.Name
	}
	if err := r.Validate(names); err != nil {
		variable := "PORTAL_PEER_REDIS_URLS (-peer-redis-urls)"
		if strings.Contains(err.Error(), "not in the region list") && !strings.HasPrefix(err.Error(), "peer") {
			variable = "PORTAL_REGION (-region)"
		}
		return fmt.Errorf("invalid %s: %w", variable, err)
	}
	return nil
}

// checkAddr accepts host:port with a numeric port.
func checkAddr(v string) error {
	host, port, err := net.SplitHostPort(v)
	if err != nil {
		return errors.New("not host:port")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return errors.New("port must be 0-65535")
	}
	if strings.ContainsAny(host, " /") {
		return errors.New("bad host")
	}
	return nil
}

// defaultDataDir is a "sluice" folder in the user's data directory:
// $XDG_DATA_HOME or ~/.local/share on Unix, the platform's application data
// folder elsewhere. Root gets /var/lib/sluice: the embedded Postgres runs as
// an unprivileged account that cannot enter root's home.
func defaultDataDir(getenv func(string) string) string {
	return dataDirFor(os.Geteuid(), getenv)
}

// dataDirFor is defaultDataDir for the effective user id euid, apart so
// tests running as root can check what every other user gets.
func dataDirFor(euid int, getenv func(string) string) string {
	if euid == 0 {
		return "/var/lib/sluice"
	}
	if runtime.GOOS != "windows" && runtime.GOOS != "darwin" {
		if x := getenv("XDG_DATA_HOME"); x != "" {
			return filepath.Join(x, "sluice")
		}
		if home := getenv("HOME"); home != "" {
			return filepath.Join(home, ".local", "share", "sluice")
		}
	}
	if dir, err := os.UserConfigDir(); err == nil {
		return filepath.Join(dir, "sluice")
	}
	return filepath.Join(os.TempDir(), "sluice-"+strconv.Itoa(os.Getuid()))
}
