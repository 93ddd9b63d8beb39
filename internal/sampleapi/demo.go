package sampleapi

import (
	"crypto/sha256"
	"fmt"
	"net/netip"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
)

// Public demo credentials for DemoResolver. They are published on purpose so
// that anyone trying the sample API can see each plan's limits; never use
// DemoResolver where real keys are expected.
const (
	DemoFreeKey = "sk_demo_free_4fQzT1mN8wXk2LpR"
	DemoProKey  = "sk_demo_pro_9hVb3CsE6yJd0QaU"
)

// The demo plans' slugs.
const (
	PlanAnonymous = "anonymous"
	PlanFree      = "free"
	PlanPro       = "pro"
)

// DemoResolver is a static enforce.Resolver with three plans (anonymous,
// free, pro) covering every route of the sample API, for running the sample
// API before the control plane supplies real plans and keys. Its plans:
//
//   - anonymous, per client IP (IPv6 per /64): 60 requests/minute overall
//     (fixed window), search 10/minute (sliding log), reports 6/minute with a
//     queue of 2 (leaky bucket, queue mode);
//   - free (DemoFreeKey): 1000/hour overall (token bucket, burst 100), search
//     30/minute (sliding counter, degrade mode), reports 10/minute with a queue
//     of 3;
//   - pro (DemoProKey): 10000/hour overall (token bucket, burst 500), search
//     100/minute with bursts of 20 (token bucket, degrade mode), reports
//     60/minute with a queue of 10.
type DemoResolver struct {
	anonymous []enforce.Limit
	keys      map[[sha256.Size]byte]enforce.Caller
}

// NewDemoResolver returns the resolver described on DemoResolver.
func NewDemoResolver() *DemoResolver {
	return &DemoResolver{
		anonymous: []enforce.Limit{
			{Name: "anonymous-global", Algorithm: enforce.FixedWindow, Limit: 60, Window: time.Minute},
			{Name: "anonymous-search", Algorithm: enforce.SlidingWindowLog, Limit: 10, Window: time.Minute, Route: RouteSearch},
			{Name: "anonymous-reports", Algorithm: enforce.LeakyBucket, Limit: 6, Window: time.Minute, Burst: 2, Mode: enforce.ModeQueue, Route: RouteCreateReport},
		},
		keys: map[[sha256.Size]byte]enforce.Caller{
			sha256.Sum256([]byte(DemoFreeKey)): {
				Subject: "key:1", KeyID: 1, UserID: 1, Plan: PlanFree,
				Limits: []enforce.Limit{
					{Name: "free-global", Algorithm: enforce.TokenBucket, Limit: 1000, Window: time.Hour, Burst: 100},
					{Name: "free-search", Algorithm: enforce.SlidingWindowCounter, Limit: 30, Window: time.Minute, Mode: enforce.ModeDegrade, Route: RouteSearch},
					{Name: "free-reports", Algorithm: enforce.LeakyBucket, Limit: 10, Window: time.Minute, Burst: 3, Mode: enforce.ModeQueue, Route: RouteCreateReport},
				},
			},
			sha256.Sum256([]byte(DemoProKey)): {
				Subject: "key:2", KeyID: 2, UserID: 2, Plan: PlanPro,
				Limits: []enforce.Limit{
					{Name: "pro-global", Algorithm: enforce.TokenBucket, Limit: 10000, Window: time.Hour, Burst: 500},
					{Name: "pro-search", Algorithm: enforce.TokenBucket, Limit: 100, Window: time.Minute, Burst: 20, Mode: enforce.ModeDegrade, Route: RouteSearch},
					{Name: "pro-reports", Algorithm: enforce.LeakyBucket, Limit: 60, Window: time.Minute, Burst: 10, Mode: enforce.ModeQueue, Route: RouteCreateReport},
				},
			},
		},
	}
}

// ResolveKey returns the caller of a demo key, or an error wrapping
// enforce.ErrInvalidKey for any other secret.
func (d *DemoResolver) ResolveKey(secret string) (enforce.Caller, error) {
	// Looking keys up by their hash keeps the comparison independent of how
	// much of a guessed secret is right.
	c, ok := d.keys[sha256.Sum256([]byte(secret))]
	if !ok {
		return enforce.Caller{}, fmt.Errorf("demo resolver: %w", enforce.ErrInvalidKey)
	}
	return c, nil
}

// Anonymous returns the anonymous plan's caller for ip. IPv6 clients are
// limited per /64, the block one subscriber usually holds, so rotating
// addresses inside it does not multiply their quota.
func (d *DemoResolver) Anonymous(ip netip.Addr) enforce.Caller {
	return enforce.Caller{Subject: AnonymousSubject(ip), Plan: PlanAnonymous, Limits: d.anonymous}
}

// AnonymousSubject names the counters of an anonymous client: "ip:<v4>" or
// "ip:<v6 /64 prefix>", and "ip:unknown" for an invalid address.
func AnonymousSubject(ip netip.Addr) string {
	return enforce.AddressPrefixes{}.Subject(ip)
}
