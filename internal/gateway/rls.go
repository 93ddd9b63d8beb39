package gateway

import (
	"context"
	"log/slog"
	"math"
	"net/http"
	"net/netip"
	"slices"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/httplimit"
	"github.com/sluicehq/sluice/internal/services"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Descriptor entry keys the rate-limit service reads. Envoy's rate_limits
// actions name them: request_headers with descriptor_key "method", "path",
// "host", "api_key" or "authorization", and remote_address (whose key is
// "remote_address"), or a generic_key "route" carrying a declared pattern.
const (
	EntryRoute         = "route"
	EntryMethod        = "method"
	EntryPath          = "path"
	EntryHost          = "host"
	EntryAPIKey        = "api_key"
	EntryAuthorization = "authorization"
	EntryRemoteAddress = "remote_address"
)

// RateLimitService is Envoy's rate-limit service
// (envoy.service.ratelimit.v3.RateLimitService) over Sluice's engine.
//
// The request's domain names the Sluice service it is for: the service's
// slug, or else its name. A domain naming no service is answered with the
// gRPC error NotFound (Envoy then applies failure_mode_deny), counted in
// sluice_envoy_unknown_total{what="domain"} and logged at most once a
// minute.
//
// A request is one decision, however many descriptors it carries, made by
// the engine's middleware exactly as for a request through the embedded
// middleware with the same key, address and route. The entries of all of
// its descriptors describe that one request (the first value of an entry
// wins):
//
//   - the route is the "route" entry (one of the service's declared
//     patterns) or else the "method", "path" (with query) and optional
//     "host" entries, matched against the service's routes; neither, or no
//     match: only plan-wide limits apply;
//   - the caller is the "api_key" entry, or the "authorization" entry
//     ("Bearer <key>"), else anonymous by "remote_address";
//   - hits_addend (0 means 1) multiplies each limit's cost.
//
// Every descriptor with one of these entries gets the decision's status. A
// descriptor with none of them is not Sluice's: it is answered OK with no
// current limit and consumes nothing, so Sluice can share a domain with
// other rate-limit descriptors; since it may also be a mistake (an action
// Sluice does not read), it is counted in
// sluice_envoy_unknown_total{what="descriptor"} and logged, with its entry
// keys and never their values, at most once a minute. The answer is
// OVER_LIMIT when the request is over its limit or has a bad key (401 in
// the embedded middleware; its JSON body is then the raw_body Envoy sends),
// and OVER_LIMIT too when limits cannot be checked and the failure mode is
// closed. Every Sluice descriptor status carries the binding limit
// (requests per unit, unit and multiplier), what remains and the time until
// reset; the rate-limit headers (draft-11 RateLimit and RateLimit-Policy,
// the X-RateLimit trio and, over the limit, Retry-After) are in
// response_headers_to_add.
//
// Envoy never reports when a request it asked about completes, so the
// slots of a concurrency tier are kept for the whole lease
// (PORTAL_CONCURRENCY_LEASE), as through /v1/check, and no release token
// is handed out: through the RLS, a concurrency tier of N admits at most N
// requests per lease. To cap requests in flight at an Envoy, use its
// cluster circuit breakers (max_requests) or its adaptive concurrency
// filter; Sluice's tier then still counts the requests other ways in hold.
type RateLimitService struct {
	rlsv3.UnimplementedRateLimitServiceServer
	catalogs Catalogs
	enforcer Checker
	log      *slog.Logger
	unknown  *unknownCounts
}

// Checker decides a request that is not an http.Request, with a request
// cost: *httplimit.Middleware.
type Checker interface {
	Check(ctx context.Context, cred httplimit.Credentials, route string, hits int64) httplimit.Verdict
}

// RateLimitServiceOptions configures NewRateLimitService; the zero value
// discards logs and registers no metrics.
type RateLimitServiceOptions struct {
	// Logger receives the unknown domains and descriptors, at most once a
	// minute each; never an entry's value.
	Logger *slog.Logger
	// Registerer, when set, receives sluice_envoy_unknown_total{what}.
	Registerer prometheus.Registerer
}

// NewRateLimitService returns the service; register it with
// rlsv3.RegisterRateLimitServiceServer.
func NewRateLimitService(catalogs Catalogs, enforcer Checker, opts RateLimitServiceOptions) *RateLimitService {
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &RateLimitService{catalogs: catalogs, enforcer: enforcer, log: logger, unknown: newUnknownCounts(opts.Registerer)}
}

// ShouldRateLimit decides req once, for all its descriptors.
func (s *RateLimitService) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	catalog := s.catalogs.Catalog()
	svc, ok := serviceForDomain(catalog, req.GetDomain())
	if !ok {
		s.unknown.domainSeen(ctx, s.log, req.GetDomain())
		return nil, status.Errorf(codes.NotFound,
			"the domain %q names no Sluice service: set the rate-limit filter's domain to the slug of the service this API is declared as", clip(req.GetDomain()))
	}
	descs := req.GetDescriptors()
	res := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(descs))}
	var a ask
	sluices := make([]bool, len(descs))
	for i, d := range descs {
		if sluices[i] = a.read(d); !sluices[i] {
			s.unknown.descriptorSeen(ctx, s.log, svc.Slug, d)
		}
	}
	var v httplimit.Verdict
	if a.known { // else nothing here is Sluice's: no decision, nothing spent
		v = s.decide(ctx, catalog, svc, a, int64(max(req.GetHitsAddend(), 1)))
		res.ResponseHeadersToAdd = headersToAdd(v.Header)
		if v.Status != http.StatusOK {
			res.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
			res.RawBody = v.Body
		}
	}
	for i := range descs {
		st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
		if sluices[i] {
			st.Code = res.OverallCode
			fillStatus(st, v.Outcome)
		}
		res.Statuses[i] = st
	}
	return res, nil
}

// serviceForDomain is the service a request's domain names: by slug, else
// by name.
func serviceForDomain(c *services.Catalog, domain string) (services.Service, bool) {
	if svc, ok := c.Service(domain); ok {
		return svc, true
	}
	for _, svc := range c.Services() {
		if domain != "" && svc.Name == domain {
			return svc, true
		}
	}
	return services.Service{}, false
}

// ask is the one request a rate-limit request's descriptors describe.
type ask struct {
	method, path, host, route, key, auth, addr string
	// known is true once an entry Sluice reads was seen.
	known bool
}

// read takes d's entries into a, keeping values already set, and reports
// whether d has an entry Sluice reads.
func (a *ask) read(d *rlv3.RateLimitDescriptor) bool {
	known := false
	for _, e := range d.GetEntries() {
		var field *string
		switch e.GetKey() {
		case EntryRoute:
			field = &a.route
		case EntryMethod:
			field = &a.method
		case EntryPath:
			field = &a.path
		case EntryHost:
			field = &a.host
		case EntryAPIKey:
			field = &a.key
		case EntryAuthorization:
			field = &a.auth
		case EntryRemoteAddress:
			field = &a.addr
		default:
			continue
		}
		known = true
		if *field == "" {
			*field = e.GetValue()
		}
	}
	a.known = a.known || known
	return known
}

// decide runs the request a describes, on svc's routes, through the
// engine.
func (s *RateLimitService) decide(ctx context.Context, catalog *services.Catalog, svc services.Service, a ask, hits int64) httplimit.Verdict {
	route := ""
	if a.route != "" {
		if slices.Contains(svc.Routes, a.route) {
			route = a.route
		}
	} else if a.method != "" && a.path != "" {
		if matched, p, ok := catalog.Match(a.method, a.host, a.path); ok && matched.Slug == svc.Slug {
			route = p
		}
	}
	cred := httplimit.Credentials{APIKey: a.key, Authorization: a.auth, Method: a.method}
	if addr, err := netip.ParseAddr(a.addr); err == nil {
		cred.Addr = addr
	}
	return s.enforcer.Check(ctx, cred, route, hits)
}

// rateLimitHeaders are copied into response_headers_to_add, in this order.
var rateLimitHeaders = []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset",
	"RateLimit-Policy", "RateLimit", "Retry-After", "WWW-Authenticate"}

func headersToAdd(h http.Header) []*corev3.HeaderValue {
	var out []*corev3.HeaderValue
	for _, name := range rateLimitHeaders {
		if v := h.Get(name); v != "" {
			out = append(out, &corev3.HeaderValue{Key: name, Value: v})
		}
	}
	return out
}

// fillStatus describes the layer that fired (or binds) in st: what
// remains of it, when it resets, and its quota and window.
func fillStatus(st *rlsv3.RateLimitResponse_DescriptorStatus, out enforce.Outcome) {
	l, ok := out.Fired()
	if !ok {
		return
	}
	st.LimitRemaining = uint32(min(max(l.Remaining, 0), math.MaxUint32))
	st.DurationUntilReset = durationpb.New(time.Duration(ceilSeconds(l.ResetAfter)) * time.Second)
	window := l.Limit.Window
	if l.Period > 0 {
		window = l.Period
	}
	unit, mult := unitOf(int64(window / time.Second))
	st.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{Name: l.Limit.Name, RequestsPerUnit: uint32(min(l.Limit.Limit, math.MaxUint32)), Unit: unit}
	if mult != 1 {
		st.CurrentLimit.UnitMultiplier = wrapperspb.UInt32(uint32(mult))
	}
}

// ceilSeconds rounds d up to whole seconds, never below zero.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// unitOf expresses a window of w seconds as Envoy's largest unit that
// divides it, times a multiplier.
func unitOf(w int64) (rlsv3.RateLimitResponse_RateLimit_Unit, int64) {
	units := []struct {
		unit    rlsv3.RateLimitResponse_RateLimit_Unit
		seconds int64
	}{
		{rlsv3.RateLimitResponse_RateLimit_WEEK, 7 * 86400},
		{rlsv3.RateLimitResponse_RateLimit_DAY, 86400},
		{rlsv3.RateLimitResponse_RateLimit_HOUR, 3600},
		{rlsv3.RateLimitResponse_RateLimit_MINUTE, 60},
		{rlsv3.RateLimitResponse_RateLimit_SECOND, 1},
	}
	for _, u := range units {
		if w >= u.seconds && w%u.seconds == 0 {
			return u.unit, w / u.seconds
		}
	}
	return rlsv3.RateLimitResponse_RateLimit_SECOND, max(w, 1)
}
