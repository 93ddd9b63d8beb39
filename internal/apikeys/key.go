package apikeys

import (
	"errors"
	"net/netip"
	"time"

	"github.com/sluicehq/sluice/internal/plans"
)

// Errors returned (wrapped) by the Service. Invalid input is reported as
// *plans.ValidationError, the same field-error type plans use.
var (
	// ErrNotFound means no key has the id (or it belongs to someone else).
	ErrNotFound = errors.New("API key not found")
	// ErrRevoked means the key was revoked; it can no longer be changed.
	ErrRevoked = errors.New("API key revoked")
	// ErrExpired means the key passed its expiry; it can no longer be rotated.
	ErrExpired = errors.New("API key expired")
	// ErrConflict means the version the caller read is stale.
	ErrConflict = errors.New("API key was changed by someone else")
	// ErrTooManyKeys means the developer already holds the most active
	// keys allowed (Service.LimitKeysPerUser); revoke one first.
	ErrTooManyKeys = errors.New("developer holds the most API keys allowed")
)

// Key states, as returned by Key.State and accepted by Filter.State.
const (
	StateActive  = "active"
	StateExpired = "expired"
	StateRevoked = "revoked"
)

// Key is an API key as operators and its owner see it. It never holds the
// secret.
type Key struct {
	ID         int64  `json:"id" db:"id"`
	UserID     int64  `json:"user_id" db:"user_id"`
	OwnerEmail string `json:"owner_email" db:"owner_email"`
	Name       string `json:"name" db:"name"`
	// Prefix is the visible start of the key's current secret.
	Prefix string `json:"prefix" db:"prefix"`
	// PlanID is the plan assigned to the key itself; nil means the owner's
	// plan applies.
	PlanID *int64 `json:"plan_id" db:"plan_id"`
	// PlanSlug is the plan that applies to the key: its own, else its owner's,
	// else the default plan ("" if none).
	PlanSlug string `json:"plan_slug" db:"plan_slug"`
	// Overrides replace the plan's same-named limits for this key (and add
	// limits the plan does not have).
	Overrides  []plans.LimitInput `json:"overrides" db:"overrides"`
	ExpiresAt  *time.Time         `json:"expires_at" db:"expires_at"`
	RevokedAt  *time.Time         `json:"revoked_at" db:"revoked_at"`
	LastUsedAt *time.Time         `json:"last_used_at" db:"last_used_at"`
	// PreviousSecretUntil is set after a rotation with a grace: when the
	// last previous secret that still works stops working.
	PreviousSecretUntil *time.Time `json:"previous_secret_until" db:"previous_secret_until"`
	CreatedAt           time.Time  `json:"created_at" db:"created_at"`
	// Version is what SetOverrides must name (optimistic concurrency).
	Version int `json:"version" db:"version"`
	// AllowedRoutes, AllowedCIDRs and ReadOnly are the key's scope
	// (enforce.Scope): empty and false permit everything.
	AllowedRoutes []string       `json:"allowed_routes" db:"allowed_routes"`
	AllowedCIDRs  []netip.Prefix `json:"allowed_cidrs" db:"allowed_cidrs"`
	ReadOnly      bool           `json:"read_only" db:"read_only"`
}

// State returns StateRevoked, StateExpired or StateActive at time now.
func (k Key) State(now time.Time) string {
	switch {
	case k.RevokedAt != nil:
		return StateRevoked
	case k.ExpiresAt != nil && !now.Before(*k.ExpiresAt):
		return StateExpired
	}
	return StateActive
}

// NewKey is what Create needs.
type NewKey struct {
	UserID int64  `json:"user_id"`
	Name   string `json:"name"`
	// PlanID nil: the owner's plan.
	PlanID    *int64             `json:"plan_id"`
	ExpiresAt *time.Time         `json:"expires_at"`
	Overrides []plans.LimitInput `json:"overrides"`
	Scope     ScopeInput         `json:"-"`
}

// ScopeInput is a key's scope as a person or a client gives it: routes as
// tiers name them ("GET /api/items/{id}", or "/api/items/{id}" for every
// method) and address ranges as CIDR text ("203.0.113.0/24"; a bare
// address is one host). Validate turns it into the stored form.
type ScopeInput struct {
	Routes   []string `json:"allowed_routes"`
	CIDRs    []string `json:"allowed_cidrs"`
	ReadOnly bool     `json:"read_only"`
}

// Filter selects keys for List. Zero fields do not filter.
type Filter struct {
	UserID int64
	// Query matches the start of a secret prefix ("sk_live_4fQ"), or part of
	// the key's name or the owner's email, case-insensitively.
	Query string
	// State is "", StateActive, StateExpired or StateRevoked.
	State string
	// Limit caps the page (default 50, at most 500); Offset skips.
	Limit, Offset int
}

// MaxGrace bounds Rotate's grace period.
const MaxGrace = 24 * time.Hour
