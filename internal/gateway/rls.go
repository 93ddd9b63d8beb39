package gateway

import (
	"context"
	"log/slog"
	"math"
	"net/http"
	"net/netip"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/httplimit"
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
// Each descriptor of a request is one decision, made by the engine's
// middleware exactly as for a request through the embedded middleware with
// the same key, address and route:
//
//   - the route is the "route" entry (a declared pattern) or else the
//     "method", "path" (with query) and optional "host" entries, matched
//     against the declared services' routes; neither, or no match: only
//     plan-wide limits apply;
//   - the caller is the "api_key" entry, or the "authorization" entry
//     ("Bearer <key>"), else anonymous by "remote_address";
//   - hits_addend (0 means 1) multiplies each limit's cost.
//
// A descriptor with none of these entries is not Sluice's: it is answered
// OK with no current limit and consumes nothing, so Sluice can share a
// domain with other rate-limit descriptors. The answer is OVER_LIMIT when
// any descriptor is over its limit or has a bad key (401 in the
// embedded middleware; its JSON body is then the raw_body Envoy sends), and
// OVER_LIMIT too when limits cannot be checked and the failure mode is
// closed. Every descriptor status carries the binding limit (requests per
// unit, unit and multiplier), what remains and the time until reset; the
// rate-limit headers (draft-11 RateLimit and RateLimit-Policy, the
// X-RateLimit trio and, over the limit, Retry-After) are in
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
}

// Checker decides a request that is not an http.Request, with a request
// cost: *httplimit.Middleware.
type Checker interface {
	Check(ctx context.Context, cred httplimit.Credentials, route string, hits int64) httplimit.Verdict
}

// NewRateLimitService returns the service; register it with
// rlsv3.RegisterRateLimitServiceServer.
func NewRateLimitService(catalogs Catalogs, enforcer Checker, logger *slog.Logger) *RateLimitService {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &RateLimitService{catalogs: catalogs, enforcer: enforcer, log: logger}
}

// ShouldRateLimit decides every descriptor of req.
func (s *RateLimitService) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	res := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	hits := int64(max(req.GetHitsAddend(), 1))
	for _, d := range req.GetDescriptors() {
		st, v := s.decide(ctx, d, hits)
		res.Statuses = append(res.Statuses, st)
		if st.Code != rlsv3.RateLimitResponse_OVER_LIMIT {
			if v != nil && res.OverallCode == rlsv3.RateLimitResponse_OK {
				res.ResponseHeadersToAdd = headersToAdd(v.Header)
			}
			continue
		}
		if res.OverallCode == rlsv3.RateLimitResponse_OK {
			// The first refusal is the one the client sees.
			res.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
			res.ResponseHeadersToAdd = headersToAdd(v.Header)
			res.RawBody = v.Body
		}
	}
	return res, nil
}

// decide runs one descriptor through the engine; the verdict is nil for a
// descriptor that is not Sluice's.
func (s *RateLimitService) decide(ctx context.Context, d *rlv3.RateLimitDescriptor, hits int64) (*rlsv3.RateLimitResponse_DescriptorStatus, *httplimit.Verdict) {
	var method, path, host, route, key, auth, addr string
	known := false
	for _, e := range d.GetEntries() {
		v := e.GetValue()
		switch e.GetKey() {
		case EntryRoute:
			route = v
		case EntryMethod:
			method = v
		case EntryPath:
			path = v
		case EntryHost:
			host = v
		case EntryAPIKey:
			key = v
		case EntryAuthorization:
			auth = v
		case EntryRemoteAddress:
			addr = v
		default:
			continue
		}
		known = true
	}
	if !known {
		return &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}, nil
	}
	if route == "" && method != "" && path != "" {
		if _, p, ok := s.catalogs.Catalog().Match(method, host, path); ok {
			route = p
		}
	}
	cred := httplimit.Credentials{APIKey: key, Authorization: auth, Method: method}
	if a, err := netip.ParseAddr(addr); err == nil {
		cred.Addr = a
	}
	v := s.enforcer.Check(ctx, cred, route, hits)
	st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	if v.Status != http.StatusOK {
		st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	fillStatus(st, v.Outcome)
	return st, &v
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
