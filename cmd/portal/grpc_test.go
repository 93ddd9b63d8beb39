package main

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
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
	req := &rlsv3.RateLimitRequest{Domain: "sluice", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{
		{Key: "method", Value: "GET"}, {Key: "path", Value: "/api/items/1"}, {Key: "remote_address", Value: "192.0.2.7"}}}}}
	if _, err := c.ShouldRateLimit(context.Background(), req); status.Code(err) != codes.Unauthenticated {
		t.Errorf("without the token: %v, want Unauthenticated", err)
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
	if res, err := c.ShouldRateLimit(ctx, req); err != nil || res.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Errorf("with the token: %v, %v; want OK", res, err)
	}
	if strings.Contains(p.out.String(), token) {
		t.Error("the gRPC token was printed")
	}
}
