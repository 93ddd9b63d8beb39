package main

import (
	"fmt"
	"net"
	"net/netip"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/sluicehq/sluice/internal/gateway"
)

// newGRPCServer is the server Envoy's rate-limit service is registered
// on: every call passes gateway.RateLimitServiceGuard (the token, and
// remote_address believed only from trusted proxies). The port also
// serves the standard health service (SERVING until shutdown begins, no
// token needed) and server reflection (token needed), so that grpcurl,
// grpc_health_probe and Kubernetes' gRPC probes work against it.
func newGRPCServer(cfg Config) (*grpc.Server, *health.Server) {
	srv := grpc.NewServer(grpc.ConnectionTimeout(5*time.Second), grpc.MaxRecvMsgSize(1<<20),
		grpc.ChainUnaryInterceptor(gateway.RateLimitServiceGuard(cfg.GRPCToken, cfg.TrustedProxies)),
		grpc.ChainStreamInterceptor(gateway.RateLimitServiceStreamGuard(cfg.GRPCToken)))
	hs := health.NewServer()
	hs.SetServingStatus(rlsServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	reflection.Register(srv)
	return srv, hs
}

// rlsServiceName is the Envoy rate-limit service's full name, as health
// checks name it.
const rlsServiceName = "envoy.service.ratelimit.v3.RateLimitService"

// checkGRPCAddr keeps the Envoy rate-limit service, which takes any
// caller's word for the key and address it decides on, to loopback unless
// it asks for a token: a bare port listens on 127.0.0.1, another host needs
// PORTAL_GRPC_TOKEN.
func checkGRPCAddr(c *Config) error {
	if c.GRPCAddr == "" || c.GRPCToken != "" {
		return nil
	}
	host, port, err := net.SplitHostPort(c.GRPCAddr)
	if err != nil {
		return nil // reported by the setting itself
	}
	if host == "" {
		c.GRPCAddr = net.JoinHostPort("127.0.0.1", port)
		return nil
	}
	if a, err := netip.ParseAddr(host); host == "localhost" || (err == nil && a.IsLoopback()) {
		return nil
	}
	return fmt.Errorf("invalid PORTAL_GRPC_ADDR (-grpc-addr) %q: listens beyond loopback without PORTAL_GRPC_TOKEN, so anyone who reaches it decides limits for any key and address; set PORTAL_GRPC_TOKEN (Envoy sends it as initial_metadata), or listen on 127.0.0.1", c.GRPCAddr)
}
