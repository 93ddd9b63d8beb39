package gateway_test

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/gateway"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/snapshot"
)

// guardedRLS serves the fixture's RateLimitService behind
// RateLimitServiceGuard on loopback and returns a client.
func guardedRLS(t *testing.T, f *fixture, token string, trusted []netip.Prefix) rlsv3.RateLimitServiceClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(gateway.RateLimitServiceGuard(token, trusted)))
	rlsv3.RegisterRateLimitServiceServer(srv, gateway.NewRateLimitService(f.catalogs(), f.mw, gateway.RateLimitServiceOptions{Logger: f.logger}))
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

func anonymousAsk(addr string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "shop", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{
		{Key: gateway.EntryMethod, Value: "GET"}, {Key: gateway.EntryPath, Value: "/orders"},
		{Key: gateway.EntryRemoteAddress, Value: addr}}}}}
}

func TestRateLimitServiceNeedsItsToken(t *testing.T) {
	f := newFixture(t, nil)
	token := "rls-token-0123456789abcdef0123456789"
	c := guardedRLS(t, f, token, nil)
	for name, md := range map[string]metadata.MD{
		"None":      nil,
		"Wrong":     metadata.Pairs("authorization", "Bearer rls-token-0123456789abcdef012345678X"),
		"NotBearer": metadata.Pairs("authorization", token),
	} {
		t.Run(name, func(t *testing.T) {
			ctx := metadata.NewOutgoingContext(context.Background(), md)
			_, err := c.ShouldRateLimit(ctx, anonymousAsk("192.0.2.1"))
			if status.Code(err) != codes.Unauthenticated {
				t.Errorf("ShouldRateLimit = %v, want Unauthenticated", err)
			}
		})
	}
	t.Run("Right", func(t *testing.T) {
		ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
		res, err := c.ShouldRateLimit(ctx, anonymousAsk("192.0.2.1"))
		if err != nil || res.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Errorf("ShouldRateLimit = %v, %v; want OK", res, err)
		}
	})
}

// TestRemoteAddressBelievedOnlyFromTrustedProxies asks for ten anonymous
// requests, each naming another remote_address, under an anonymous plan of
// 3 an hour: a caller that is not a trusted proxy gets 3 admitted (they
// all count as its own address), a trusted one 10 (each its client's).
func TestRemoteAddressBelievedOnlyFromTrustedProxies(t *testing.T) {
	const limit = 3
	f := newFixture(t, nil)
	if _, err := f.plans.Create(context.Background(), actor, plans.PlanInput{Slug: "anon", Name: "Anonymous", IsAnonymous: true,
		Limits: []plans.LimitInput{{Name: "all", Algorithm: "fixed_window", Limit: limit, WindowSeconds: 3600}}}); err != nil {
		t.Fatal(err)
	}
	f.waitFor(t, func(s *snapshot.Snapshot) bool { _, ok := s.AnonymousPlan(); return ok })
	for _, tc := range []struct {
		name    string
		trusted []netip.Prefix
		net     string
		want    int
	}{
		{"Untrusted", nil, "203.0.113.", limit},
		{"Trusted", []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, "198.51.100.", 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := guardedRLS(t, f, "", tc.trusted)
			admitted := 0
			for i := range 10 {
				res, err := c.ShouldRateLimit(context.Background(), anonymousAsk(tc.net+strconv.Itoa(i+1)))
				if err != nil {
					t.Fatal(err)
				}
				if res.GetOverallCode() == rlsv3.RateLimitResponse_OK {
					admitted++
				}
			}
			if admitted != tc.want {
				t.Errorf("%d of 10 admitted, want %d", admitted, tc.want)
			}
		})
	}
}
