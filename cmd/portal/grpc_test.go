package main

import (
	"context"
	"io"
	"net"
	"slices"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/testenv"
)

// TestGRPCAddrLoopbackWithoutAToken: without PORTAL_GRPC_TOKEN the Envoy
// rate-limit service listens on loopback only (issue 30, item 8).
func TestGRPCAddrLoopbackWithoutAToken(t *testing.T) {
	token := strings.Repeat("g", 32)
	for _, tc := range []struct {
		addr, token, want, refusal string
	}{
		{":8081", "", "127.0.0.1:8081", ""},
		{"127.0.0.1:8081", "", "127.0.0.1:8081", ""},
		{"[::1]:8081", "", "[::1]:8081", ""},
		{"localhost:8081", "", "localhost:8081", ""},
		{"0.0.0.0:8081", "", "", "listens beyond loopback without PORTAL_GRPC_TOKEN"},
		{"10.0.0.5:8081", "", "", "listens beyond loopback without PORTAL_GRPC_TOKEN"},
		{":8081", token, ":8081", ""},
		{"0.0.0.0:8081", token, "0.0.0.0:8081", ""},
		{":8081", "short", "", "invalid PORTAL_GRPC_TOKEN (-grpc-token) (value hidden): 5 characters"},
	} {
		t.Run(tc.addr+"/token="+tc.token, func(t *testing.T) {
			cfg, _, err := LoadConfig(nil, envOf(map[string]string{"HOME": "/home/u", "PORTAL_GRPC_ADDR": tc.addr, "PORTAL_GRPC_TOKEN": tc.token}), io.Discard)
			if tc.refusal != "" {
				if err == nil || !strings.Contains(err.Error(), tc.refusal) || (tc.token != "" && strings.Contains(err.Error(), tc.token)) {
					t.Fatalf("LoadConfig = %v, want a refusal saying %q", err, tc.refusal)
				}
				return
			}
			if err != nil || cfg.GRPCAddr != tc.want {
				t.Errorf("GRPCAddr = %q, %v; want %q", cfg.GRPCAddr, err, tc.want)
			}
		})
	}
}

// TestRunGRPCNeedsItsToken starts the portal with PORTAL_GRPC_TOKEN: a
// call without it is refused, one with it decided.
func TestRunGRPCNeedsItsToken(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	token := strings.Repeat("k", 40)
	env := baseEnv(t)
	env["DATABASE_URL"] = testenv.PostgresURL(t)
	env["PORTAL_GRPC_ADDR"] = addr
	env["PORTAL_GRPC_TOKEN"] = token
	p := startPortal(t, env)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := rlsv3.NewRateLimitServiceClient(conn)
	req := &rlsv3.RateLimitRequest{Domain: "demo", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{
		{Key: "method", Value: "GET"}, {Key: "path", Value: "/api/items/1"}, {Key: "remote_address", Value: "192.0.2.7"}}}}}
	if _, err := c.ShouldRateLimit(context.Background(), req); status.Code(err) != codes.Unauthenticated {
		t.Errorf("without the token: %v, want Unauthenticated", err)
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
	if res, err := c.ShouldRateLimit(ctx, req); err != nil || res.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Errorf("with the token: %v, %v; want OK", res, err)
	}
	// The health service answers a probe that has no token; reflection,
	// which lists the port's services, needs it (issue 35, item 4).
	hc := healthpb.NewHealthClient(conn)
	for _, service := range []string{"", "envoy.service.ratelimit.v3.RateLimitService"} {
		if res, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: service}); err != nil || res.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health of %q without a token: %v, %v; want SERVING", service, res, err)
		}
	}
	if got, err := reflectedServices(context.Background(), conn); status.Code(err) != codes.Unauthenticated {
		t.Errorf("reflection without the token: %v, %v; want Unauthenticated", got, err)
	}
	got, err := reflectedServices(ctx, conn)
	if err != nil || !slices.Contains(got, "envoy.service.ratelimit.v3.RateLimitService") || !slices.Contains(got, "grpc.health.v1.Health") {
		t.Errorf("reflection with the token lists %v, %v; want the rate-limit and health services", got, err)
	}
	if strings.Contains(p.out.String(), token) {
		t.Error("the gRPC token was printed")
	}
}

// reflectedServices asks the server's reflection service for the names
// of the services it serves.
func reflectedServices(ctx context.Context, conn *grpc.ClientConn) ([]string, error) {
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		return nil, err
	}
	defer stream.CloseSend()
	// A refused stream may end before the request is sent: Send then says
	// io.EOF and Recv gives the server's status.
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil && err != io.EOF {
		return nil, err
	}
	res, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, s := range res.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	return names, nil
}
