package enforce

import (
	"errors"
	"net/netip"
	"strconv"
	"time"
)

// ErrInvalidKey means a presented API key is malformed, unknown, revoked or
// expired. The middleware answers 401 and never falls back to the anonymous
// plan.
var ErrInvalidKey = errors.New("invalid API key")

// Caller is who a request comes from and which limits apply to it.
type Caller struct {
	// Subject names the caller's counters: "dev:<user id>" for every key of
	// one developer, or "ip:<address or block>" (see AddressPrefixes).
	Subject string
	// Key is "key:<id>" for a key's caller, "" for an anonymous one: the
	// Request.Key under which the key's own (PerKey) limits count.
	Key string
	// KeyID and UserID are zero for anonymous callers.
	KeyID  int64
	UserID int64
	// Plan is the slug of the plan whose limits apply.
	Plan string
	// Limits holds every limit of the plan, plan-wide (Route "") and
	// per-endpoint; the middleware keeps those that match the request.
	Limits []Limit
	// Anchor is when the caller's quotas renew (Request.Anchor): a
	// developer's billing anchor; zero for anonymous callers (midnight UTC,
	// the 1st).
	Anchor time.Time // Scope narrows what the caller's key may be used for; nil permits
	// everything (and is what anonymous callers have).
	Scope *Scope
}

// Resolver turns a request's credentials into a Caller. The control plane
// implements it over its in-memory snapshot; it runs on every request, so it
// must not do network I/O.
type Resolver interface {
	// ResolveKey resolves a presented API key secret, or returns an error
	// wrapping ErrInvalidKey.
	ResolveKey(secret string) (Caller, error)
	// Anonymous returns the caller for a request without a key, limited by
	// client address.
	Anonymous(ip netip.Addr) Caller
}

// DeveloperSubject is the subject of every key of one developer: their keys
// share its plan-wide limits, so a plan's limit does not multiply with the
// keys a developer creates.
func DeveloperSubject(userID int64) string { return "dev:" + strconv.FormatInt(userID, 10) }

// KeyScope is a key's Request.Key inside its developer's subject, under
// which its PerKey limits (endpoint tiers, its own overrides) count.
func KeyScope(keyID int64) string { return "key:" + strconv.FormatInt(keyID, 10) }
