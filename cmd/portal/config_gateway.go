package main

import "time"

// gatewayConfig is what the gateways' ways in (/v1/check, the Envoy
// service) need beyond the middleware's settings.
type gatewayConfig struct {
	// SlotLease is how long a concurrency slot taken through /v1/check or
	// the Envoy service lasts unless released (PORTAL_GATEWAY_SLOT_LEASE):
	// those gateways are not asked to say when the request ends, so the
	// slot either is released by the gateway (the shipped nginx config
	// does it) or runs out after this.
	SlotLease time.Duration
}

// DefaultGatewaySlotLease is PORTAL_GATEWAY_SLOT_LEASE's default: a
// developer's finished requests hold a slot at most this long through a
// gateway that cannot release it.
const DefaultGatewaySlotLease = 10 * time.Second

func gatewaySettings() []setting {
	return []setting{
		{env: "PORTAL_GATEWAY_SLOT_LEASE", flag: "gateway-slot-lease", def: DefaultGatewaySlotLease.String(),
			accepts: "a duration from 1s to 1h: how long a concurrency slot taken through /v1/check or the Envoy service lasts unless the gateway releases it (the shipped nginx config does); Caddy, Traefik and Envoy cannot, so keep it above the API's longest request",
			set: func(c *Config, v string) error {
				return setDuration(&c.Gateway.SlotLease, v, time.Second, time.Hour)
			}},
	}
}
