package storetest

import (
	"fmt"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
)

// NewClockAt returns a controlled clock reading t.
func NewClockAt(t time.Time) *Clock { return &Clock{t: t} }

// Advance moves the clock on by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// Resolver is a static httplimit Resolver for the ways in's tests: Keys
// maps a secret to its caller, every other caller is anonymous with
// AnonLimits, and AnonCalls counts the anonymous resolutions, so a test
// can show that an invalid key never falls back to the anonymous plan.
type Resolver struct {
	Keys       map[string]enforce.Caller
	AnonLimits []enforce.Limit
	AnonCalls  atomic.Int64
}

// ResolveKey returns the key's caller, or enforce.ErrInvalidKey.
func (r *Resolver) ResolveKey(secret string) (enforce.Caller, error) {
	c, ok := r.Keys[secret]
	if !ok {
		return enforce.Caller{}, fmt.Errorf("test resolver: %w", enforce.ErrInvalidKey)
	}
	return c, nil
}

// Anonymous returns the address's anonymous caller.
func (r *Resolver) Anonymous(ip netip.Addr) enforce.Caller {
	r.AnonCalls.Add(1)
	return enforce.Caller{Subject: "ip:" + ip.String(), Plan: "anonymous", Limits: r.AnonLimits}
}
