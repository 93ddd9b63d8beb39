package gateway

import (
	"context"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
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
	enforcer HitsEnforcer
	log      *slog.Logger
}

// HitsEnforcer is the engine's middleware with a request cost:
// *enforce.Middleware.
type HitsEnforcer interface {
	EnforceHits(w http.ResponseWriter, r *http.Request, route string, hits int64, next http.Handler)
}

// NewRateLimitService returns the service; register it with
// rlsv3.RegisterRateLimitServiceServer.
func NewRateLimitService(catalogs Catalogs, enforcer HitsEnforcer, logger *slog.Logger) *RateLimitService {
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
		st, rec := s.decide(ctx, d, hits)
		res.Statuses = append(res.Statuses, st)
		if st.Code != rlsv3.RateLimitResponse_OVER_LIMIT {
			if rec != nil && res.OverallCode == rlsv3.RateLimitResponse_OK {
				res.ResponseHeadersToAdd = headersToAdd(rec.header)
			}
			continue
		}
		if res.OverallCode == rlsv3.RateLimitResponse_OK {
			// The first refusal is the one the client sees.
			res.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
			res.ResponseHeadersToAdd = headersToAdd(rec.header)
			res.RawBody = rec.body
		}
	}
	return res, nil
}

// decide runs one descriptor through the engine; rec is nil for a
// descriptor that is not Sluice's.
func (s *RateLimitService) decide(ctx context.Context, d *rlv3.RateLimitDescriptor, hits int64) (*rlsv3.RateLimitResponse_DescriptorStatus, *recorder) {
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
	r, _ := http.NewRequestWithContext(ctx, http.MethodGet, "/", nil)
	switch {
	case key != "":
		r.Header.Set("X-API-Key", key)
	case auth != "":
		r.Header.Set("Authorization", auth)
	}
	r.RemoteAddr = remoteAddr(addr)
	rec := &recorder{header: http.Header{}}
	s.enforcer.EnforceHits(rec, r, route, hits, admitted)
	st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	if rec.status != http.StatusOK {
		st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	fillStatus(st, rec.header)
	return st, rec
}

// remoteAddr turns Envoy's remote_address (a bare address) into the
// RemoteAddr form the engine parses.
func remoteAddr(v string) string {
	a, err := netip.ParseAddr(v)
	if err != nil {
		return ""
	}
	return netip.AddrPortFrom(a, 0).String()
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

// fillStatus reads the binding limit from the headers the engine wrote:
// the RateLimit item names it with what remains and the seconds until
// reset, and its RateLimit-Policy item has its quota and window.
func fillStatus(st *rlsv3.RateLimitResponse_DescriptorStatus, h http.Header) {
	name, params, ok := firstItem(h.Get("RateLimit"))
	if !ok {
		return
	}
	if r, err := strconv.ParseUint(params["r"], 10, 32); err == nil {
		st.LimitRemaining = uint32(r)
	}
	if t, err := strconv.ParseInt(params["t"], 10, 64); err == nil {
		st.DurationUntilReset = durationpb.New(time.Duration(t) * time.Second)
	}
	for _, item := range strings.Split(h.Get("RateLimit-Policy"), ",") {
		pname, pp, ok := firstItem(item)
		if !ok || pname != name {
			continue
		}
		q, errQ := strconv.ParseUint(pp["q"], 10, 32)
		w, errW := strconv.ParseInt(pp["w"], 10, 64)
		if errQ != nil || errW != nil {
			return
		}
		unit, mult := unitOf(w)
		st.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{Name: name, RequestsPerUnit: uint32(q), Unit: unit}
		if mult != 1 {
			st.CurrentLimit.UnitMultiplier = wrapperspb.UInt32(uint32(mult))
		}
		return
	}
}

// firstItem parses the first item of a structured-field list such as
// `"pro-search";r=37;t=23`.
func firstItem(v string) (name string, params map[string]string, ok bool) {
	v, _, _ = strings.Cut(v, ",")
	parts := strings.Split(strings.TrimSpace(v), ";")
	name = strings.Trim(parts[0], `"`)
	if name == "" {
		return "", nil, false
	}
	params = map[string]string{}
	for _, p := range parts[1:] {
		k, val, _ := strings.Cut(strings.TrimSpace(p), "=")
		params[k] = val
	}
	return name, params, true
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

// recorder keeps what the engine answered for one descriptor.
type recorder struct {
	header http.Header
	status int
	body   []byte
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	if len(r.body)+len(b) <= maxErrorBody {
		r.body = append(r.body, b...)
	}
	return len(b), nil
}
