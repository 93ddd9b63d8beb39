// Package snapshot holds each instance's immutable in-memory view of the
// control plane (plans, their limits, API keys by secret hash, developers'
// plans) and keeps it current: Postgres announces every change with NOTIFY,
// the Holder rebuilds and swaps the view atomically, and a slow resync timer
// covers a missed notification. The enforcement middleware resolves keys
// against the view only, so a request never waits on Postgres, and if
// Postgres goes down the last view keeps serving.
package snapshot

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/services"
)

// DB is what Load needs: *pgxpool.Pool and *pgx.Conn satisfy it. Load reads
// in one read-only repeatable-read transaction so the view is consistent.
type DB interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// keyEntry is what a secret hash resolves to.
type keyEntry struct {
	// secretExpires is when this secret stops working (a rotated-out secret
	// in its grace period); zero if it does not expire.
	secretExpires time.Time
	// keyExpires is the key's own expiry; zero if none.
	keyExpires time.Time
	caller     enforce.Caller
}

// Snapshot is an immutable view of the control plane. Never modify what its
// methods return: it is shared by every request.
type Snapshot struct {
	loadedAt  time.Time
	plans     []plans.Plan
	byID      map[int64]*plans.Plan
	bySlug    map[string]*plans.Plan
	anonymous *plans.Plan
	def       *plans.Plan
	keys      map[[32]byte]keyEntry
	callers   map[int64]enforce.Caller // by key id
	userPlans map[int64]int64
	anchors   map[int64]time.Time // by user id
	// anonymousLimits are the anonymous plan's limits in engine form.
	anonymousLimits []enforce.Limit
	// catalog holds the declared services and matches gateway requests
	// to their routes.
	catalog *services.Catalog
}

const (
	// Every developer's plan (0 for none) and billing anchor, when their
	// quotas renew.
	selectUserPlans = `
SELECT id, COALESCE(plan_id, 0), COALESCE(billing_anchor, created_at)
FROM users WHERE role = 'developer'`
	// Revoked keys are left out (they resolve as unknown), and so are the
	// keys of a disabled developer; keys that expired long ago too, so the
	// view does not grow with dead keys. Retired secrets are kept until they
	// expire, because rotation's grace depends on them.
	selectSecrets = `
SELECT s.hash, s.expires_at, k.id, k.user_id, k.plan_id,
       -- most keys have no overrides: skip decoding an empty array for each
       CASE WHEN k.overrides = '[]'::jsonb THEN NULL ELSE k.overrides END,
       k.expires_at,
       -- most keys have no scope: skip building one for each
       CASE WHEN k.allowed_routes = '{}' AND k.allowed_cidrs = '{}' AND NOT k.read_only THEN NULL
            ELSE k.allowed_routes END,
       k.allowed_cidrs, k.read_only
FROM api_key_secrets s
JOIN api_keys k ON k.id = s.key_id
JOIN users u ON u.id = k.user_id
WHERE k.revoked_at IS NULL
  AND u.disabled_at IS NULL
  AND (s.expires_at IS NULL OR s.expires_at > now())
  AND (k.expires_at IS NULL OR k.expires_at > now() - interval '30 days')`
)

// secretRow is one row of selectSecrets. Rows are scanned positionally into
// one reused value: a rebuild reads every key, and reflection per row
// showed up in BenchmarkLoad.
type secretRow struct {
	Hash            []byte
	SecretExpiresAt *time.Time
	ID              int64
	UserID          int64
	PlanID          *int64
	Overrides       []plans.LimitInput
	KeyExpiresAt    *time.Time
	AllowedRoutes   []string
	AllowedCIDRs    []netip.Prefix
	ReadOnly        bool
}

// Load reads a complete snapshot from db, in one read-only repeatable-read
// transaction so that plans, users and keys agree with each other.
func Load(ctx context.Context, db DB) (*Snapshot, error) {
	tx, err := db.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("load snapshot: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read-only: nothing to lose
	ps, err := plans.LoadAll(ctx, tx)
	if err != nil {
		return nil, fmt.Errorf("load snapshot: %w", err)
	}
	s := &Snapshot{
		loadedAt:  time.Now(),
		plans:     ps,
		byID:      make(map[int64]*plans.Plan, len(ps)),
		bySlug:    make(map[string]*plans.Plan, len(ps)),
		userPlans: map[int64]int64{},
		anchors:   map[int64]time.Time{},
	}
	planLimits := make(map[int64][]enforce.Limit, len(ps))
	for i := range s.plans {
		p := &s.plans[i]
		s.byID[p.ID] = p
		s.bySlug[p.Slug] = p
		if p.IsDefault {
			s.def = p
		}
		if p.IsAnonymous {
			s.anonymous = p
		}
		planLimits[p.ID] = p.EnforceLimits()
	}
	if s.anonymous != nil {
		s.anonymousLimits = planLimits[s.anonymous.ID]
	}
	svcs, err := services.LoadAll(ctx, tx)
	if err != nil {
		return nil, fmt.Errorf("load snapshot: %w", err)
	}
	if s.catalog, err = services.NewCatalog(svcs); err != nil {
		return nil, fmt.Errorf("load snapshot: %w", err)
	}

	rows, err := tx.Query(ctx, selectUserPlans)
	if err != nil {
		return nil, fmt.Errorf("load snapshot: users: %w", err)
	}
	var userID, planID int64
	var anchor time.Time
	if _, err := pgx.ForEachRow(rows, []any{&userID, &planID, &anchor}, func() error {
		if planID != 0 {
			s.userPlans[userID] = planID
		}
		s.anchors[userID] = anchor
		return nil
	}); err != nil {
		return nil, fmt.Errorf("load snapshot: users: %w", err)
	}

	rows, err = tx.Query(ctx, selectSecrets)
	if err != nil {
		return nil, fmt.Errorf("load snapshot: keys: %w", err)
	}
	s.keys = make(map[[32]byte]keyEntry)
	// A key's secrets (current and retiring) share one Caller.
	s.callers = map[int64]enforce.Caller{}
	callers := s.callers
	var r secretRow
	_, err = pgx.ForEachRow(rows, []any{&r.Hash, &r.SecretExpiresAt, &r.ID, &r.UserID, &r.PlanID, &r.Overrides, &r.KeyExpiresAt, &r.AllowedRoutes, &r.AllowedCIDRs, &r.ReadOnly}, func() error {
		if len(r.Hash) != 32 {
			return fmt.Errorf("key %d has a %d-byte hash", r.ID, len(r.Hash))
		}
		c, ok := callers[r.ID]
		if !ok {
			c = s.keyCaller(r, planLimits)
			callers[r.ID] = c
		}
		e := keyEntry{caller: c}
		if r.SecretExpiresAt != nil {
			e.secretExpires = *r.SecretExpiresAt
		}
		if r.KeyExpiresAt != nil {
			e.keyExpires = *r.KeyExpiresAt
		}
		s.keys[[32]byte(r.Hash)] = e
		r.Overrides = nil // a NULL leaves the previous row's value otherwise
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("load snapshot: keys: %w", err)
	}
	return s, nil
}

// keyCaller works out the limits of a key: its own plan, else its owner's,
// else the default plan, with the key's overrides replacing same-named
// limits (and adding the others). The subject is the key's developer, so
// all their keys share the plan-wide limits; tiers and the key's overrides
// count per key (PerKey). Keys without overrides share their plan's slice.
func (s *Snapshot) keyCaller(r secretRow, planLimits map[int64][]enforce.Limit) enforce.Caller {
	c := enforce.Caller{Subject: enforce.DeveloperSubject(r.UserID), Key: enforce.KeyScope(r.ID), KeyID: r.ID, UserID: r.UserID,
		Anchor: s.anchors[r.UserID]}
	var plan *plans.Plan
	switch {
	case r.PlanID != nil:
		plan = s.byID[*r.PlanID]
	case s.userPlans[r.UserID] != 0:
		plan = s.byID[s.userPlans[r.UserID]]
	default:
		plan = s.def
	}
	if plan == nil {
		// No plan applies (no default plan is marked): the key resolves, with
		// no limits but its overrides.
		c.Limits = []enforce.Limit{}
	} else {
		c.Plan = plan.Slug
		c.Limits = planLimits[plan.ID]
	}
	c.Limits = plans.ApplyOverrides(c.Plan, c.Limits, r.Overrides)
	// The row is reused for the next key: the scope keeps copies.
	if scope := (enforce.Scope{Routes: slices.Clone(r.AllowedRoutes), CIDRs: slices.Clone(r.AllowedCIDRs), ReadOnly: r.ReadOnly}); !scope.Unrestricted() {
		c.Scope = &scope
	}
	return c
}

// LoadedAt is when the snapshot was read.
func (s *Snapshot) LoadedAt() time.Time { return s.loadedAt }

// Plans returns every plan, ordered by slug.
func (s *Snapshot) Plans() []plans.Plan { return s.plans }

// Plan returns the plan with the given id.
func (s *Snapshot) Plan(id int64) (plans.Plan, bool) {
	p, ok := s.byID[id]
	if !ok {
		return plans.Plan{}, false
	}
	return *p, true
}

// PlanBySlug returns the plan with the given slug.
func (s *Snapshot) PlanBySlug(slug string) (plans.Plan, bool) {
	p, ok := s.bySlug[slug]
	if !ok {
		return plans.Plan{}, false
	}
	return *p, true
}

// DefaultPlan returns the plan new developers get, if one is marked.
func (s *Snapshot) DefaultPlan() (plans.Plan, bool) {
	if s.def == nil {
		return plans.Plan{}, false
	}
	return *s.def, true
}

// AnonymousPlan returns the plan callers without a key get, if one is marked.
func (s *Snapshot) AnonymousPlan() (plans.Plan, bool) {
	if s.anonymous == nil {
		return plans.Plan{}, false
	}
	return *s.anonymous, true
}

// UserPlan returns the plan that applies to a developer: theirs, else the
// default plan.
func (s *Snapshot) UserPlan(userID int64) (plans.Plan, bool) {
	if id, ok := s.userPlans[userID]; ok {
		return s.Plan(id)
	}
	return s.DefaultPlan()
}

// KeyCaller returns the caller a key resolves as (its subject and the limits
// enforced for it), by key id, for live-usage views that Peek the engine
// without the secret. Revoked keys, and keys with no live secret, are
// absent.
func (s *Snapshot) KeyCaller(keyID int64) (enforce.Caller, bool) {
	c, ok := s.callers[keyID]
	return c, ok
}

// Services returns the declared services and their routes.
func (s *Snapshot) Services() *services.Catalog { return s.catalog }

// Keys returns how many usable secrets the snapshot holds.
func (s *Snapshot) Keys() int { return len(s.keys) }
