// Package policy is the control plane's view as it travels to programs
// that enforce limits outside the portal (the public guard package): every
// plan's limits in engine form and every usable API key by the SHA-256 of
// its secret, never a secret itself. The portal serves a Document from its
// snapshot; a Resolver answers the engine's identity questions from one, as
// the portal's snapshot holder does.
package policy

import (
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/enforce"
)

// Document is the policy at one snapshot version.
type Document struct {
	// Version increases with every rebuild of the portal's snapshot.
	Version uint64 `json:"version"`
	// AnonymousPlan is the slug of the plan for callers without a key, ""
	// for none.
	AnonymousPlan string `json:"anonymous_plan"`
	// Plans holds each plan's limits by slug.
	Plans map[string][]Limit `json:"plans"`
	Keys  []Key              `json:"keys"`
	// AnonIPv4Prefix and AnonIPv6Prefix are the address blocks anonymous
	// callers are limited by (enforce.AddressPrefixes; 0 means its
	// defaults), so a program enforcing outside the portal counts an
	// anonymous caller under the same subject as the portal does.
	AnonIPv4Prefix int `json:"anon_ipv4_prefix,omitempty"`
	AnonIPv6Prefix int `json:"anon_ipv6_prefix,omitempty"`
}

// Key is one usable secret of an API key.
type Key struct {
	// Hash is the hex SHA-256 of the secret.
	Hash   string `json:"hash"`
	KeyID  int64  `json:"key_id"`
	UserID int64  `json:"user_id"`
	// Plan is the slug of the plan whose limits apply ("" for none).
	Plan string `json:"plan"`
	// Limits, when set, replace the plan's (a key with overrides).
	Limits        []Limit    `json:"limits,omitempty"`
	SecretExpires *time.Time `json:"secret_expires_at,omitempty"`
	KeyExpires    *time.Time `json:"key_expires_at,omitempty"`
	// Anchor is when the developer's quotas renew (enforce.Caller.Anchor).
	Anchor *time.Time `json:"anchor,omitempty"`
	// AllowedRoutes, AllowedCIDRs and ReadOnly are the key's scope
	// (enforce.Scope); absent, the key may do anything.
	AllowedRoutes []string       `json:"allowed_routes,omitempty"`
	AllowedCIDRs  []netip.Prefix `json:"allowed_cidrs,omitempty"`
	ReadOnly      bool           `json:"read_only,omitempty"`
}

// Limit is enforce.Limit on the wire, its window in milliseconds.
type Limit struct {
	Name      string `json:"name"`
	Algorithm string `json:"algorithm"`
	Limit     int64  `json:"limit"`
	WindowMS  int64  `json:"window_ms"`
	Burst     int64  `json:"burst,omitempty"`
	Cost      int64  `json:"cost,omitempty"`
	Mode      string `json:"mode,omitempty"`
	Route     string `json:"route,omitempty"`
	// PerKey keeps the limit's state per API key rather than per developer
	// (enforce.Limit.PerKey).
	PerKey bool `json:"per_key,omitempty"`
	// Period is a quota's renewal period (enforce.Limit.Period).
	Period string `json:"period,omitempty"`
	// Precision is leased or local (enforce.Limit.Precision); absent
	// means exact.
	Precision string `json:"precision,omitempty"`
	// CountWhen and CostHeader settle the cost after the response
	// (enforce.Limit.CountWhen, CostHeader): guard settles as the
	// portal's middleware does.
	CountWhen  string `json:"count_when,omitempty"`
	CostHeader string `json:"cost_header,omitempty"`
}

// FromEngine converts engine limits for the wire.
func FromEngine(ls []enforce.Limit) []Limit {
	out := make([]Limit, len(ls))
	for i, l := range ls {
		out[i] = Limit{Name: l.Name, Algorithm: string(l.Algorithm), Limit: l.Limit, WindowMS: l.Window.Milliseconds(),
			Burst: l.Burst, Cost: l.Cost, Mode: string(l.Mode), Route: l.Route, PerKey: l.PerKey, Period: string(l.Period),
			Precision: string(l.Precision), CountWhen: string(l.CountWhen), CostHeader: l.CostHeader}
		if out[i].CountWhen == string(enforce.CountAlways) {
			out[i].CountWhen = "" // the default, left off the wire
		}
	}
	return out
}

func toEngine(ls []Limit) ([]enforce.Limit, error) {
	out := make([]enforce.Limit, len(ls))
	for i, l := range ls {
		e := enforce.Limit{Name: l.Name, Algorithm: enforce.Algorithm(l.Algorithm), Limit: l.Limit,
			Window: time.Duration(l.WindowMS) * time.Millisecond, Burst: l.Burst, Cost: l.Cost,
			Mode: enforce.Mode(l.Mode), Route: l.Route, PerKey: l.PerKey, Period: enforce.Period(l.Period),
			Precision: enforce.Precision(l.Precision), CountWhen: enforce.CountWhen(l.CountWhen), CostHeader: l.CostHeader}
		if !e.Algorithm.Valid() || e.Limit < 1 || e.Window <= 0 || (e.Mode != "" && !e.Mode.Valid()) || !e.CountWhen.Valid() ||
			(e.Algorithm == enforce.Quota) != e.Period.Valid() {
			return nil, fmt.Errorf("limit %q is not valid", l.Name)
		}
		if err := enforce.ValidatePrecision(e); err != nil {
			return nil, err
		}
		out[i] = e
	}
	return out, nil
}

// ErrNotLoaded is returned by Resolver.ResolveKey before the first
// document is installed: the key may be fine, so the middleware answers 503.
var ErrNotLoaded = errors.New("policy not loaded yet")

var (
	errMalformed = fmt.Errorf("%w: malformed API key", enforce.ErrInvalidKey)
	errUnknown   = fmt.Errorf("%w: unknown or revoked API key", enforce.ErrInvalidKey)
	errExpired   = fmt.Errorf("%w: expired API key", enforce.ErrInvalidKey)
)

type entry struct {
	caller                    enforce.Caller
	secretExpires, keyExpires time.Time
}

type compiled struct {
	version   uint64
	keys      map[[32]byte]entry
	anonPlan  string
	anonLimit []enforce.Limit
	anonBlock enforce.AddressPrefixes
}

// Resolver is an enforce.Resolver over the last installed Document. It is
// safe for concurrent use; Install swaps documents atomically.
type Resolver struct {
	current atomic.Pointer[compiled]
	now     func() time.Time
}

// NewResolver returns an empty Resolver judging expiry by now (nil means
// time.Now).
func NewResolver(now func() time.Time) *Resolver {
	if now == nil {
		now = time.Now
	}
	return &Resolver{now: now}
}

// Install checks d and makes it current. Keys of one plan share one limits
// slice, as in the portal's snapshot, so the middleware's caches hold.
func (r *Resolver) Install(d Document) error {
	c := &compiled{version: d.Version, keys: make(map[[32]byte]entry, len(d.Keys)), anonPlan: d.AnonymousPlan,
		anonBlock: enforce.AddressPrefixes{IPv4: d.AnonIPv4Prefix, IPv6: d.AnonIPv6Prefix}}
	if err := c.anonBlock.Validate(); err != nil {
		return fmt.Errorf("anonymous address blocks: %w", err)
	}
	plans := make(map[string][]enforce.Limit, len(d.Plans))
	for slug, ls := range d.Plans {
		e, err := toEngine(ls)
		if err != nil {
			return fmt.Errorf("plan %q: %w", slug, err)
		}
		plans[slug] = e
	}
	c.anonLimit = plans[d.AnonymousPlan]
	for _, k := range d.Keys {
		raw, err := hex.DecodeString(k.Hash)
		if err != nil || len(raw) != 32 {
			return fmt.Errorf("key %d: hash is not 32 hex bytes", k.KeyID)
		}
		// As in the portal's snapshot: a developer's keys share the plan-wide
		// limits (the developer's subject), per-key layers count under Key.
		caller := enforce.Caller{Subject: enforce.DeveloperSubject(k.UserID), Key: enforce.KeyScope(k.KeyID),
			KeyID: k.KeyID, UserID: k.UserID, Plan: k.Plan, Limits: plans[k.Plan]}
		if k.Anchor != nil {
			caller.Anchor = *k.Anchor
		}
		if sc := (enforce.Scope{Routes: k.AllowedRoutes, CIDRs: k.AllowedCIDRs, ReadOnly: k.ReadOnly}); !sc.Unrestricted() {
			caller.Scope = &sc
		}
		if k.Limits != nil {
			if caller.Limits, err = toEngine(k.Limits); err != nil {
				return fmt.Errorf("key %d: %w", k.KeyID, err)
			}
		}
		if caller.Limits == nil {
			caller.Limits = []enforce.Limit{}
		}
		e := entry{caller: caller}
		if k.SecretExpires != nil {
			e.secretExpires = *k.SecretExpires
		}
		if k.KeyExpires != nil {
			e.keyExpires = *k.KeyExpires
		}
		c.keys[[32]byte(raw)] = e
	}
	r.current.Store(c)
	return nil
}

// Version is the installed document's version, 0 before the first.
func (r *Resolver) Version() uint64 {
	if c := r.current.Load(); c != nil {
		return c.version
	}
	return 0
}

// ResolveKey resolves a presented secret as the portal's snapshot does.
func (r *Resolver) ResolveKey(secret string) (enforce.Caller, error) {
	if apikeys.Check(secret) != nil {
		return enforce.Caller{}, errMalformed
	}
	c := r.current.Load()
	if c == nil {
		return enforce.Caller{}, ErrNotLoaded
	}
	e, ok := c.keys[apikeys.Hash(secret)]
	if !ok {
		return enforce.Caller{}, errUnknown
	}
	now := r.now()
	if (!e.secretExpires.IsZero() && !now.Before(e.secretExpires)) || (!e.keyExpires.IsZero() && !now.Before(e.keyExpires)) {
		return enforce.Caller{}, errExpired
	}
	return e.caller, nil
}

// Anonymous returns the caller for a request without a key, as the
// portal's snapshot does: the subject of ip's address block under the
// anonymous plan.
func (r *Resolver) Anonymous(ip netip.Addr) enforce.Caller {
	c := r.current.Load()
	if c == nil {
		return enforce.Caller{Subject: enforce.AddressPrefixes{}.Subject(ip)}
	}
	caller := enforce.Caller{Subject: c.anonBlock.Subject(ip)}
	if c.anonPlan != "" {
		caller.Plan = c.anonPlan
		caller.Limits = c.anonLimit
	}
	return caller
}
