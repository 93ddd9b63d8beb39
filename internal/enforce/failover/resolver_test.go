package failover_test

import (
	"fmt"
	"net/netip"
	"sync/atomic"

	"github.com/sluicehq/sluice/internal/enforce"
)

// mwResolver is a static Resolver that counts anonymous resolutions, so
// tests can prove an invalid key never falls back to the anonymous plan.
type mwResolver struct {
	keys       map[string]enforce.Caller
	anonLimits []enforce.Limit
	anonCalls  atomic.Int64
}

func (r *mwResolver) ResolveKey(secret string) (enforce.Caller, error) {
	c, ok := r.keys[secret]
	if !ok {
		return enforce.Caller{}, fmt.Errorf("test resolver: %w", enforce.ErrInvalidKey)
	}
	return c, nil
}

func (r *mwResolver) Anonymous(ip netip.Addr) enforce.Caller {
	r.anonCalls.Add(1)
	return enforce.Caller{Subject: "ip:" + ip.String(), Plan: "anonymous", Limits: r.anonLimits}
}
