package plans

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/audit"
	"github.com/sluicehq/sluice/internal/enforce"
)

// Service reads and changes plans in Postgres. Every change is audit-logged
// in the same transaction and announced to every instance by the schema's
// NOTIFY triggers.
//
// At most one plan is the default and one the anonymous plan: creating or
// updating a plan with IsDefault (or IsAnonymous) set takes that role from
// the plan that had it, in the same transaction (its version increments and
// the change is audit-logged), rather than refusing, because "make this the
// default" is what an operator means.
type Service struct {
	pool   *pgxpool.Pool
	routes []string
	logger *slog.Logger
	// reduced lists the routes of routes that have a reduced answer for
	// degrade mode; checkDegrade is false until WithReducedAnswers says.
	reduced      []string
	checkDegrade bool
}

// NewService returns a Service over pool. Tiers may only name a route some
// service declares (the service_routes table, read when a tier is
// validated) or one of routes, ServeMux patterns such as
// "GET /api/items/{id}" that the portal itself serves.
func NewService(pool *pgxpool.Pool, routes []string, logger *slog.Logger) *Service {
	return &Service{pool: pool, routes: slices.Clone(routes), logger: logger}
}

// WithReducedAnswers says which of the routes given to NewService have a
// reduced answer for callers over a degrade-mode tier; from then on a
// degrade tier on any other of those routes, or plan-wide, is refused
// (CheckReducedAnswers). It returns s, for use at construction.
func (s *Service) WithReducedAnswers(routes []string) *Service {
	s.reduced = slices.Clone(routes)
	s.checkDegrade = true
	return s
}

// ReducedAnswers returns what WithReducedAnswers was given, and whether it
// was called, for plan files to apply the same rule.
func (s *Service) ReducedAnswers() ([]string, bool) {
	return slices.Clone(s.reduced), s.checkDegrade
}

// degradeProblems applies CheckReducedAnswers when WithReducedAnswers was
// called.
func (s *Service) degradeProblems(field string, limits []LimitInput) error {
	if !s.checkDegrade {
		return nil
	}
	return CheckReducedAnswers(field, limits, s.routes, s.reduced)
}

// Routes returns the route patterns given to NewService, for forms and docs.
// Services declare further routes; RoutesContext lists them too.
func (s *Service) Routes() []string { return slices.Clone(s.routes) }

const selectDeclaredRoutes = `SELECT pattern FROM service_routes ORDER BY service_id, position, id`

// DeclaredRoutes returns the routes services declare, service by service,
// appended to extra without repeats: what a tier (or a key's override) may
// name.
func DeclaredRoutes(ctx context.Context, db audit.DBTX, extra []string) ([]string, error) {
	rows, err := db.Query(ctx, selectDeclaredRoutes)
	if err != nil {
		return nil, fmt.Errorf("select declared routes: %w", err)
	}
	declared, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("select declared routes: %w", err)
	}
	out := slices.Clone(extra)
	for _, r := range declared {
		if !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out, nil
}

// RoutesContext returns every route a tier may name: the routes given to
// NewService, then those services declare, without repeats.
func (s *Service) RoutesContext(ctx context.Context) ([]string, error) {
	return DeclaredRoutes(ctx, s.pool, s.routes)
}

const (
	selectPlans = `
SELECT id, slug, name, description, is_default, is_anonymous, is_public, version, archived_at, created_at, updated_at
FROM plans`
	selectLimits = `
SELECT id, plan_id, name, route, algorithm, limit_count, window_ms, burst, cost, mode, period, count_per, precision, position,
       count_when, cost_header
FROM plan_limits
WHERE plan_id = ANY($1)
ORDER BY plan_id, position, id`
)

// limitRow is a plan_limits row as stored (window in milliseconds).
type limitRow struct {
	ID         int64  `db:"id"`
	PlanID     int64  `db:"plan_id"`
	Name       string `db:"name"`
	Route      string `db:"route"`
	Algorithm  string `db:"algorithm"`
	LimitCount int64  `db:"limit_count"`
	WindowMS   int64  `db:"window_ms"`
	Burst      int64  `db:"burst"`
	Cost       int64  `db:"cost"`
	Mode       string `db:"mode"`
	Period     string `db:"period"`
	CountPer   string `db:"count_per"`
	Precision  string `db:"precision"`
	Position   int    `db:"position"`
	CountWhen  string `db:"count_when"`
	CostHeader string `db:"cost_header"`
}

func (r limitRow) limit() Limit {
	window := time.Duration(r.WindowMS) * time.Millisecond
	if w, fixed := fixedWindow(enforce.Algorithm(r.Algorithm)); fixed {
		window = w
	}
	return Limit{
		ID:        r.ID,
		Name:      r.Name,
		Route:     r.Route,
		Algorithm: enforce.Algorithm(r.Algorithm),
		Limit:     r.LimitCount,
		Window:    window,
		Burst:     r.Burst,
		Cost:      r.Cost,
		Mode:      enforce.Mode(r.Mode),
		Period:    enforce.Period(r.Period),
		CountPer:  r.CountPer,
		Precision: enforce.Precision(r.Precision),
		Position:  r.Position,

		CountWhen:  enforce.CountWhen(r.CountWhen),
		CostHeader: r.CostHeader,
	}
}

// queryPlans runs a plans query (selectPlans plus a tail) and attaches each
// plan's limits.
func queryPlans(ctx context.Context, db audit.DBTX, tail string, args ...any) ([]Plan, error) {
	rows, err := db.Query(ctx, selectPlans+" "+tail, args...)
	if err != nil {
		return nil, err
	}
	ps, err := pgx.CollectRows(rows, pgx.RowToStructByName[Plan])
	if err != nil {
		return nil, err
	}
	if len(ps) == 0 {
		return ps, nil
	}
	ids := make([]int64, len(ps))
	index := make(map[int64]int, len(ps))
	for i, p := range ps {
		ids[i] = p.ID
		index[p.ID] = i
		ps[i].Limits = []Limit{}
	}
	rows, err = db.Query(ctx, selectLimits, ids)
	if err != nil {
		return nil, err
	}
	lrs, err := pgx.CollectRows(rows, pgx.RowToStructByName[limitRow])
	if err != nil {
		return nil, err
	}
	for _, r := range lrs {
		i := index[r.PlanID]
		ps[i].Limits = append(ps[i].Limits, r.limit())
	}
	return ps, nil
}

// LoadAll returns every plan with its limits, ordered by slug, through any
// pgx handle; the snapshot uses it inside its own read transaction.
func LoadAll(ctx context.Context, db audit.DBTX) ([]Plan, error) {
	ps, err := queryPlans(ctx, db, "ORDER BY slug")
	if err != nil {
		return nil, fmt.Errorf("load plans: %w", err)
	}
	return ps, nil
}

// List returns every plan with its limits, ordered by slug.
func (s *Service) List(ctx context.Context) ([]Plan, error) {
	return LoadAll(ctx, s.pool)
}

// Get returns the plan with the given id, or ErrNotFound.
func (s *Service) Get(ctx context.Context, id int64) (Plan, error) {
	return getPlan(ctx, s.pool, "WHERE id = $1", id)
}

// GetBySlug returns the plan with the given slug, or ErrNotFound.
func (s *Service) GetBySlug(ctx context.Context, slug string) (Plan, error) {
	return getPlan(ctx, s.pool, "WHERE slug = $1", slug)
}

func getPlan(ctx context.Context, db audit.DBTX, tail string, args ...any) (Plan, error) {
	ps, err := queryPlans(ctx, db, tail, args...)
	if err != nil {
		return Plan{}, fmt.Errorf("get plan: %w", err)
	}
	if len(ps) == 0 {
		return Plan{}, fmt.Errorf("plan %v: %w", args[0], ErrNotFound)
	}
	return ps[0], nil
}

// lockPlan reads the plan for update and checks the version the caller read.
func lockPlan(ctx context.Context, tx pgx.Tx, id int64, version int) (Plan, error) {
	p, err := getPlan(ctx, tx, "WHERE id = $1 FOR UPDATE", id)
	if err != nil {
		return Plan{}, err
	}
	if p.Version != version {
		return Plan{}, fmt.Errorf("plan %d is at version %d, not %d: %w", id, p.Version, version, ErrConflict)
	}
	return p, nil
}

const (
	// The un-marked plans' versions increment so that an edit based on a read
	// from before this change is refused, not silently re-marking them.
	unmarkDefault = `
UPDATE plans SET is_default = false, version = version + 1, updated_at = now()
WHERE is_default AND id <> $1
RETURNING id`
	unmarkAnonymous = `
UPDATE plans SET is_anonymous = false, version = version + 1, updated_at = now()
WHERE is_anonymous AND id <> $1
RETURNING id`
)

// takeRoles removes the default and anonymous marks from other plans when in
// claims them for plan id (0 for a plan not yet inserted).
func takeRoles(ctx context.Context, tx pgx.Tx, actor string, id int64, in PlanInput) error {
	type role struct {
		claim bool
		sql   string
		field string
	}
	for _, r := range []role{{in.IsDefault, unmarkDefault, "is_default"}, {in.IsAnonymous, unmarkAnonymous, "is_anonymous"}} {
		if !r.claim {
			continue
		}
		rows, err := tx.Query(ctx, r.sql, id)
		if err != nil {
			return fmt.Errorf("unmark %s: %w", r.field, err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return fmt.Errorf("unmark %s: %w", r.field, err)
		}
		for _, other := range ids {
			if err := audit.Record(ctx, tx, actor, "plan.update", audit.ObjectPlan, strconv.FormatInt(other, 10),
				map[string]bool{r.field: true}, map[string]bool{r.field: false}); err != nil {
				return err
			}
		}
	}
	return nil
}

const (
	insertPlan = `
INSERT INTO plans (slug, name, description, is_default, is_anonymous, is_public)
VALUES ($1, $2, $3, $4, $5, $6)
RETURNING id`
	insertLimit = `
INSERT INTO plan_limits (plan_id, name, route, algorithm, limit_count, window_ms, burst, cost, mode, position, period, count_per, precision,
                         count_when, cost_header)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
RETURNING id`
)

// Create validates in and stores a new plan. Marking it default or anonymous
// takes that role from the plan that had it, in the same transaction.
// Errors: *ValidationError, ErrSlugTaken.
func (s *Service) Create(ctx context.Context, actor string, in PlanInput) (Plan, error) {
	in = in.normalized()
	routes, err := s.RoutesContext(ctx)
	if err != nil {
		return Plan{}, err
	}
	if err := joinValidation(Validate(in, routes), s.degradeProblems("limits", in.Limits)); err != nil {
		return Plan{}, err
	}
	var created Plan
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := takeRoles(ctx, tx, actor, 0, in); err != nil {
			return err
		}
		var id int64
		if err := tx.QueryRow(ctx, insertPlan, in.Slug, in.Name, in.Description,
			in.IsDefault, in.IsAnonymous, in.IsPublic).Scan(&id); err != nil {
			return mapWriteError(err)
		}
		for i, l := range in.Limits {
			if _, err := insertLimitRow(ctx, tx, id, l, i); err != nil {
				return err
			}
		}
		p, err := getPlan(ctx, tx, "WHERE id = $1", id)
		if err != nil {
			return err
		}
		created = p
		return audit.Record(ctx, tx, actor, "plan.create", audit.ObjectPlan, strconv.FormatInt(id, 10), nil, p)
	})
	if err != nil {
		return Plan{}, fmt.Errorf("create plan %q: %w", in.Slug, err)
	}
	return created, nil
}

func insertLimitRow(ctx context.Context, tx pgx.Tx, planID int64, l LimitInput, position int) (int64, error) {
	l = l.normalized()
	var id int64
	err := tx.QueryRow(ctx, insertLimit, planID, l.Name, l.Route, l.Algorithm, l.Limit,
		l.WindowSeconds*1000, l.Burst, l.Cost, l.Mode, position, l.Period, l.CountPer, l.Precision, l.CountWhen, l.CostHeader).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("insert limit %q: %w", l.Name, mapWriteError(err))
	}
	return id, nil
}

const (
	updatePlan = `
UPDATE plans
SET slug = $2, name = $3, description = $4, is_default = $5, is_anonymous = $6, is_public = $7,
    version = version + 1, updated_at = now()
WHERE id = $1`
	bumpPlan = `UPDATE plans SET version = version + 1, updated_at = now() WHERE id = $1`
)

const (
	deleteOtherLimits = `DELETE FROM plan_limits WHERE plan_id = $1 AND name <> ALL($2)`
	upsertLimit       = `
INSERT INTO plan_limits (plan_id, name, route, algorithm, limit_count, window_ms, burst, cost, mode, position, period, count_per, precision,
                         count_when, cost_header)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
ON CONFLICT (plan_id, name) DO UPDATE
SET route = EXCLUDED.route, algorithm = EXCLUDED.algorithm, limit_count = EXCLUDED.limit_count,
    window_ms = EXCLUDED.window_ms, burst = EXCLUDED.burst, cost = EXCLUDED.cost,
    mode = EXCLUDED.mode, position = EXCLUDED.position, period = EXCLUDED.period,
    count_per = EXCLUDED.count_per, precision = EXCLUDED.precision, count_when = EXCLUDED.count_when,
    cost_header = EXCLUDED.cost_header`
)

// ReplaceLimits makes limits, validated and in display order, the plan's
// whole set inside tx: limits it no longer names are deleted, the others
// upserted by name, so a limit edited in place keeps its row and the
// engine rescales its live state rather than starting afresh. Plan files
// write limits through it too, so both ways store every field alike.
func ReplaceLimits(ctx context.Context, tx pgx.Tx, planID int64, limits []LimitInput) error {
	names := make([]string, len(limits))
	for i, l := range limits {
		names[i] = l.Name
	}
	if _, err := tx.Exec(ctx, deleteOtherLimits, planID, names); err != nil {
		return fmt.Errorf("delete limits: %w", err)
	}
	for i, l := range limits {
		l = l.normalized()
		if _, err := tx.Exec(ctx, upsertLimit, planID, l.Name, l.Route, l.Algorithm, l.Limit,
			l.WindowSeconds*1000, l.Burst, l.Cost, l.Mode, i, l.Period, l.CountPer, l.Precision, l.CountWhen, l.CostHeader); err != nil {
			return fmt.Errorf("upsert limit %q: %w", l.Name, err)
		}
	}
	return nil
}

// Update replaces the plan's fields and limits, provided version is still
// the plan's version. Limits keep their ids when their name is unchanged.
// Errors: *ValidationError, ErrNotFound, ErrConflict, ErrSlugTaken.
func (s *Service) Update(ctx context.Context, actor string, id int64, version int, in PlanInput) (Plan, error) {
	in = in.normalized()
	routes, err := s.RoutesContext(ctx)
	if err != nil {
		return Plan{}, err
	}
	if err := joinValidation(Validate(in, routes), s.degradeProblems("limits", in.Limits)); err != nil {
		return Plan{}, err
	}
	var updated Plan
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		before, err := lockPlan(ctx, tx, id, version)
		if err != nil {
			return err
		}
		if err := archivedRoles(before, in); err != nil {
			return err
		}
		if err := takeRoles(ctx, tx, actor, id, in); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, updatePlan, id, in.Slug, in.Name, in.Description,
			in.IsDefault, in.IsAnonymous, in.IsPublic); err != nil {
			return mapWriteError(err)
		}
		if err := ReplaceLimits(ctx, tx, id, in.Limits); err != nil {
			return mapWriteError(err)
		}
		updated, err = getPlan(ctx, tx, "WHERE id = $1", id)
		if err != nil {
			return err
		}
		return audit.Record(ctx, tx, actor, "plan.update", audit.ObjectPlan, strconv.FormatInt(id, 10), before, updated)
	})
	if err != nil {
		return Plan{}, fmt.Errorf("update plan %d: %w", id, err)
	}
	return updated, nil
}

const (
	// Keys that can never be used again (revoked or expired) do not hold a
	// plan in place: they are detached so the foreign key lets it go.
	detachDeadKeys = `
UPDATE api_keys SET plan_id = NULL
WHERE plan_id = $1 AND (revoked_at IS NOT NULL OR expires_at <= now())`
	countPlanUsers = `
SELECT (SELECT count(*) FROM api_keys WHERE plan_id = $1),
       (SELECT count(*) FROM users WHERE plan_id = $1)`
	deletePlan = `DELETE FROM plans WHERE id = $1`
)

// Delete removes a plan and its limits. It refuses with ErrInUse while live
// keys or developers are assigned the plan, or while it is the default or
// anonymous plan (mark another plan first). Revoked and expired keys that
// named the plan are returned to their owner's plan. Errors: ErrNotFound,
// ErrInUse.
func (s *Service) Delete(ctx context.Context, actor string, id int64) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		before, err := getPlan(ctx, tx, "WHERE id = $1 FOR UPDATE", id)
		if err != nil {
			return err
		}
		if before.IsDefault || before.IsAnonymous {
			return fmt.Errorf("%w: it is the default or anonymous plan", ErrInUse)
		}
		if _, err := tx.Exec(ctx, detachDeadKeys, id); err != nil {
			return fmt.Errorf("detach dead keys: %w", err)
		}
		var keys, developers int
		if err := tx.QueryRow(ctx, countPlanUsers, id).Scan(&keys, &developers); err != nil {
			return fmt.Errorf("count plan users: %w", err)
		}
		if keys > 0 || developers > 0 {
			return fmt.Errorf("%w: %d keys and %d developers use it", ErrInUse, keys, developers)
		}
		if _, err := tx.Exec(ctx, deletePlan, id); err != nil {
			return mapWriteError(err)
		}
		return audit.Record(ctx, tx, actor, "plan.delete", audit.ObjectPlan, strconv.FormatInt(id, 10), before, nil)
	})
	if err != nil {
		return fmt.Errorf("delete plan %d: %w", id, err)
	}
	return nil
}

// AddLimit appends a tier to the plan, provided planVersion is current, and
// returns the updated plan (version incremented). Field errors name the
// tier's own fields ("window_seconds"), not a list path.
// Errors: *ValidationError, ErrNotFound, ErrConflict.
func (s *Service) AddLimit(ctx context.Context, actor string, planID int64, planVersion int, in LimitInput) (Plan, error) {
	in = in.normalized()
	return s.editLimits(ctx, planID, planVersion, func(tx pgx.Tx, p Plan) error {
		if err := s.validateTier(ctx, in, p.Limits, 0, len(p.Limits)+1); err != nil {
			return err
		}
		position := 0
		if n := len(p.Limits); n > 0 {
			position = p.Limits[n-1].Position + 1
		}
		id, err := insertLimitRow(ctx, tx, planID, in, position)
		if err != nil {
			return err
		}
		return audit.Record(ctx, tx, actor, "limit.create", audit.ObjectLimit, strconv.FormatInt(id, 10), nil,
			limitAudit(planID, in.limit(id, position)))
	})
}

const updateLimit = `
UPDATE plan_limits
SET name = $3, route = $4, algorithm = $5, limit_count = $6, window_ms = $7, burst = $8, cost = $9, mode = $10,
    period = $11, count_per = $12, precision = $13, count_when = $14, cost_header = $15
WHERE id = $2 AND plan_id = $1`

// UpdateLimit replaces one tier of the plan, provided planVersion is current.
// Errors: *ValidationError, ErrNotFound (plan or limit), ErrConflict.
func (s *Service) UpdateLimit(ctx context.Context, actor string, planID int64, planVersion int, limitID int64, in LimitInput) (Plan, error) {
	in = in.normalized()
	return s.editLimits(ctx, planID, planVersion, func(tx pgx.Tx, p Plan) error {
		i := slices.IndexFunc(p.Limits, func(l Limit) bool { return l.ID == limitID })
		if i < 0 {
			return fmt.Errorf("limit %d of plan %d: %w", limitID, planID, ErrNotFound)
		}
		if err := s.validateTier(ctx, in, p.Limits, limitID, len(p.Limits)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, updateLimit, planID, limitID, in.Name, in.Route, in.Algorithm, in.Limit,
			in.WindowSeconds*1000, in.Burst, in.Cost, in.Mode, in.Period, in.CountPer, in.Precision, in.CountWhen, in.CostHeader); err != nil {
			return fmt.Errorf("update limit: %w", mapWriteError(err))
		}
		before := p.Limits[i]
		return audit.Record(ctx, tx, actor, "limit.update", audit.ObjectLimit, strconv.FormatInt(limitID, 10),
			limitAudit(planID, before), limitAudit(planID, in.limit(limitID, before.Position)))
	})
}

const promoteLimit = `UPDATE plan_limits SET mode = 'reject' WHERE id = $2 AND plan_id = $1`

// PromoteLimit turns a shadow tier (mode shadow, tried in the dark) into an
// enforced one (mode reject) with its figures and its counters as they are,
// provided planVersion is current; audited as limit.promote.
// Errors: *ValidationError (the tier is not a shadow tier), ErrNotFound (plan
// or limit), ErrConflict.
func (s *Service) PromoteLimit(ctx context.Context, actor string, planID int64, planVersion int, limitID int64) (Plan, error) {
	return s.editLimits(ctx, planID, planVersion, func(tx pgx.Tx, p Plan) error {
		i := slices.IndexFunc(p.Limits, func(l Limit) bool { return l.ID == limitID })
		if i < 0 {
			return fmt.Errorf("limit %d of plan %d: %w", limitID, planID, ErrNotFound)
		}
		before := p.Limits[i]
		if before.Mode != enforce.ModeShadow {
			return &ValidationError{Fields: []FieldError{{Field: "mode",
				Message: fmt.Sprintf("only a shadow tier can be promoted; %q is in mode %s", before.Name, before.Mode)}}}
		}
		if _, err := tx.Exec(ctx, promoteLimit, planID, limitID); err != nil {
			return fmt.Errorf("promote limit: %w", mapWriteError(err))
		}
		after := before
		after.Mode = enforce.ModeReject
		return audit.Record(ctx, tx, actor, "limit.promote", audit.ObjectLimit, strconv.FormatInt(limitID, 10),
			limitAudit(planID, before), limitAudit(planID, after))
	})
}

const deleteLimit = `DELETE FROM plan_limits WHERE id = $2 AND plan_id = $1`

// DeleteLimit removes one tier of the plan, provided planVersion is current.
// Errors: ErrNotFound (plan or limit), ErrConflict.
func (s *Service) DeleteLimit(ctx context.Context, actor string, planID int64, planVersion int, limitID int64) (Plan, error) {
	return s.editLimits(ctx, planID, planVersion, func(tx pgx.Tx, p Plan) error {
		i := slices.IndexFunc(p.Limits, func(l Limit) bool { return l.ID == limitID })
		if i < 0 {
			return fmt.Errorf("limit %d of plan %d: %w", limitID, planID, ErrNotFound)
		}
		if _, err := tx.Exec(ctx, deleteLimit, planID, limitID); err != nil {
			return fmt.Errorf("delete limit: %w", err)
		}
		return audit.Record(ctx, tx, actor, "limit.delete", audit.ObjectLimit, strconv.FormatInt(limitID, 10),
			limitAudit(planID, p.Limits[i]), nil)
	})
}

// limitAudit is a limit as recorded in the audit log: with its plan, so the
// entry can be read without the plan.
func limitAudit(planID int64, l Limit) any {
	return struct {
		PlanID int64 `json:"plan_id"`
		Limit
	}{planID, l}
}

// editLimits runs one tier edit: lock the plan at the version the caller
// read, apply, increment the version, return the plan as it now is.
func (s *Service) editLimits(ctx context.Context, planID int64, planVersion int, edit func(pgx.Tx, Plan) error) (Plan, error) {
	var updated Plan
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		p, err := lockPlan(ctx, tx, planID, planVersion)
		if err != nil {
			return err
		}
		if err := edit(tx, p); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, bumpPlan, planID); err != nil {
			return fmt.Errorf("bump plan version: %w", err)
		}
		if updated, err = getPlan(ctx, tx, "WHERE id = $1", planID); err != nil {
			return err
		}
		names := make([]string, len(updated.Limits))
		for i, l := range updated.Limits {
			names[i] = l.Name
		}
		if errs := PolicyConflicts("limits", updated.Slug, names); len(errs) > 0 {
			// The form edits one tier: name its field alone.
			return &ValidationError{Fields: []FieldError{{Field: "name", Message: errs[0].Message}}}
		}
		return nil
	})
	if err != nil {
		var ve *ValidationError
		if errors.As(err, &ve) {
			return Plan{}, ve
		}
		return Plan{}, fmt.Errorf("edit limits of plan %d: %w", planID, err)
	}
	return updated, nil
}

// validateTier checks one submitted tier against the rules and against the
// plan's other tiers (skipping the one with id self), naming the tier's own
// fields.
func (s *Service) validateTier(ctx context.Context, in LimitInput, others []Limit, self int64, total int) error {
	routes, err := s.RoutesContext(ctx)
	if err != nil {
		return err
	}
	errs := ValidateLimit("", in, routes)
	var ve *ValidationError
	if errors.As(s.degradeProblems("", []LimitInput{in}), &ve) {
		errs = append(errs, ve.Fields...)
	}
	if total > MaxLimitsPerPlan {
		errs = append(errs, FieldError{Field: "limits", Message: fmt.Sprintf("at most %d limits per plan", MaxLimitsPerPlan)})
	}
	for _, o := range others {
		if o.ID == self {
			continue
		}
		if o.Name == in.Name {
			errs = append(errs, FieldError{Field: "name", Message: fmt.Sprintf("the plan already has a limit named %q", in.Name)})
		}
		if o.Route == in.Route && string(o.Algorithm) == in.Algorithm && int64(o.Window/time.Second) == in.WindowSeconds &&
			string(o.Period) == in.Period && o.Input().CountPer == in.CountPer {
			errs = append(errs, FieldError{Field: "route", Message: fmt.Sprintf("duplicates limit %q: same route, algorithm and window", o.Name)})
		}
	}
	if len(errs) > 0 {
		return &ValidationError{Fields: errs}
	}
	return nil
}

// A key's plan is its own, else its developer's, else the default plan; a
// developer's is their own, else the default (the snapshot resolves them the
// same way).
const countsByPlan = `
SELECT p.id,
       (SELECT count(*) FROM api_keys k WHERE k.plan_id = p.id
          AND k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > now())) AS keys,
       (SELECT count(*) FROM users u WHERE u.plan_id = p.id) AS developers,
       (SELECT count(*) FROM api_keys k JOIN users u ON u.id = k.user_id
         WHERE COALESCE(k.plan_id, u.plan_id, d.id) = p.id
           AND k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > now())) AS keys_on_plan,
       (SELECT count(*) FROM users u
         WHERE u.role = 'developer' AND COALESCE(u.plan_id, d.id) = p.id) AS developers_on_plan
FROM plans p LEFT JOIN (SELECT id FROM plans WHERE is_default) d ON true`

// Counts returns, per plan id, how many live keys (neither revoked nor
// expired) and developers are assigned the plan directly, and how many are
// on it in effect (directly, through their developer or as the default).
// Plans with none are absent from the map.
func (s *Service) Counts(ctx context.Context) (map[int64]PlanCounts, error) {
	rows, err := s.pool.Query(ctx, countsByPlan)
	if err != nil {
		return nil, fmt.Errorf("count plan users: %w", err)
	}
	counts := map[int64]PlanCounts{}
	var id int64
	var c PlanCounts
	_, err = pgx.ForEachRow(rows, []any{&id, &c.Keys, &c.Developers, &c.KeysOnPlan, &c.DevelopersOnPlan}, func() error {
		if c != (PlanCounts{}) {
			counts[id] = c
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("count plan users: %w", err)
	}
	return counts, nil
}

// mapWriteError turns constraint violations into the package's errors.
func mapWriteError(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return err
	}
	switch {
	case pgErr.Code == "23505" && pgErr.ConstraintName == "plans_slug_key":
		return fmt.Errorf("%w: %s", ErrSlugTaken, pgErr.Message)
	case pgErr.Code == "23505" && (pgErr.ConstraintName == "plans_one_default" || pgErr.ConstraintName == "plans_one_anonymous"):
		// a concurrent transaction claimed the role first
		return fmt.Errorf("%w: %s", ErrConflict, pgErr.Message)
	case pgErr.Code == "23503":
		return fmt.Errorf("%w: %s", ErrInUse, pgErr.Message)
	}
	return err
}

// KeyLimits returns what the engine enforces for a key resolved to the plan
// planSlug ("" when no plan applies) with the key's overrides: the plan's
// limits with ApplyOverrides, the snapshot's rule. It reads Postgres, so
// views see a change at once and can show keys the snapshot no longer
// holds (revoked ones); a plan deleted meanwhile leaves the overrides alone.
func (s *Service) KeyLimits(ctx context.Context, planSlug string, overrides []LimitInput) ([]enforce.Limit, error) {
	var base []enforce.Limit
	if planSlug != "" {
		p, err := s.GetBySlug(ctx, planSlug)
		switch {
		case err == nil:
			base = p.EnforceLimits()
		case !errors.Is(err, ErrNotFound):
			return nil, err
		}
	}
	return ApplyOverrides(planSlug, base, overrides), nil
}
