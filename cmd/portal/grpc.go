package main

import (
	"fmt"
	"net"
	"net/netip"
	"time"

	"google.golang.org/grpc"

	"github.com/sluicehq/sluice/internal/gateway"
)

// newGRPCServer is the server Envoy's rate-limit service is registered
// on: every call passes gateway.RateLimitServiceGuard (the token, and
// remote_address believed only from trusted proxies).
func newGRPCServer(cfg Config) *grpc.Server {
	return grpc.NewServer(grpc.ConnectionTimeout(5*time.Second), grpc.MaxRecvMsgSize(1<<20),
		grpc.ChainUnaryInterceptor(gateway.RateLimitServiceGuard(cfg.GRPCToken, cfg.TrustedProxies)))
}

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
