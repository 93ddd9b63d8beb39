package gateway

import (
	"context"
	"crypto/subtle"
	"net"
	"net/netip"
	"strings"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// RateLimitServiceGuard is the interceptor the Envoy rate-limit service's
// gRPC server runs every call through, before RateLimitService sees it:
//
//   - with token set, a call without metadata "authorization: Bearer
//     <token>" (Envoy's grpc_service initial_metadata) is refused with
//     Unauthenticated, compared in constant time;
//   - a remote_address entry is the client address only when the caller
//     (the Envoy) is a trusted proxy, as X-Forwarded-For is believed only
//     from one (PORTAL_TRUSTED_PROXIES); from any other caller it is
//     replaced by the caller's own address, so that no caller can spread
//     its anonymous requests over addresses it names.
//
// The gRPC health service (grpc.health.v1.Health) answers without the
// token, so that a load balancer's or Kubernetes' gRPC probe needs none;
// it tells whether the port serves, nothing else.
func RateLimitServiceGuard(token string, trusted []netip.Prefix) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := checkToken(ctx, token, info.FullMethod); err != nil {
			return nil, err
		}
		if r, isRLS := req.(*rlsv3.RateLimitRequest); isRLS {
			if caller, known := callerAddr(ctx); !known || !trustedAddr(caller, trusted) {
				value := ""
				if known {
					value = caller.String()
				}
				for _, d := range r.GetDescriptors() {
					for _, e := range d.GetEntries() {
						if e.GetKey() == EntryRemoteAddress {
							e.Value = value
						}
					}
				}
			}
		}
		return handler(ctx, req)
	}
}

// RateLimitServiceStreamGuard is RateLimitServiceGuard for streaming
// calls: server reflection (which lists the port's services) needs the
// token as every decision does; the health service's Watch does not.
func RateLimitServiceStreamGuard(token string) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := checkToken(ss.Context(), token, info.FullMethod); err != nil {
			return err
		}
		return handler(srv, ss)
	}
}

// healthPrefix starts the full method name of every health call.
const healthPrefix = "/grpc.health.v1.Health/"

// checkToken refuses a call without metadata "authorization: Bearer
// <token>" when a token is set, compared in constant time; health calls
// pass.
func checkToken(ctx context.Context, token, method string) error {
	if token == "" || strings.HasPrefix(method, healthPrefix) {
		return nil
	}
	want := []byte("Bearer " + token)
	md, _ := metadata.FromIncomingContext(ctx)
	ok := false
	for _, v := range md.Get("authorization") {
		ok = ok || subtle.ConstantTimeCompare([]byte(v), want) == 1
	}
	if !ok {
		return status.Error(codes.Unauthenticated, "send the rate-limit service's token (PORTAL_GRPC_TOKEN) as metadata \"authorization: Bearer <token>\"")
	}
	return nil
}

// callerAddr is the address of the gRPC call's peer.
func callerAddr(ctx context.Context) (netip.Addr, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return netip.Addr{}, false
	}
	if tcp, ok := p.Addr.(*net.TCPAddr); ok {
		a, ok := netip.AddrFromSlice(tcp.IP)
		return a.Unmap(), ok
	}
	ap, err := netip.ParseAddrPort(p.Addr.String())
	return ap.Addr().Unmap(), err == nil
}

func trustedAddr(a netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
