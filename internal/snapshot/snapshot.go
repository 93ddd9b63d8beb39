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
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/plans"
)

var errNotImplemented = errors.New("not implemented yet")

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
	userPlans map[int64]int64
	// anonymousLimits are the anonymous plan's limits in engine form.
	anonymousLimits []enforce.Limit
}

// Load reads a complete snapshot from db.
func Load(ctx context.Context, db DB) (*Snapshot, error) { return nil, errNotImplemented }

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

// Keys returns how many usable secrets the snapshot holds.
func (s *Snapshot) Keys() int { return len(s.keys) }
