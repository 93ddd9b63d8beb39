package plans

import (
	"context"
	"errors"
	"log/slog"
	"slices"

	"github.com/jackc/pgx/v5/pgxpool"
)

var errNotImplemented = errors.New("not implemented yet")

// Service reads and changes plans in Postgres. Every change is audit-logged
// in the same transaction and announced to every instance by the schema's
// NOTIFY triggers.
type Service struct {
	pool   *pgxpool.Pool
	routes []string
	logger *slog.Logger
}

// NewService returns a Service over pool. routes are the ServeMux patterns
// the protected API serves (e.g. "GET /api/items/{id}"); tiers may only name
// one of them.
func NewService(pool *pgxpool.Pool, routes []string, logger *slog.Logger) *Service {
	return &Service{pool: pool, routes: slices.Clone(routes), logger: logger}
}

// Routes returns the route patterns tiers may name, for forms and docs.
func (s *Service) Routes() []string { return slices.Clone(s.routes) }

// List returns every plan with its limits, ordered by slug.
func (s *Service) List(ctx context.Context) ([]Plan, error) { return nil, errNotImplemented }

// Get returns the plan with the given id, or ErrNotFound.
func (s *Service) Get(ctx context.Context, id int64) (Plan, error) {
	return Plan{}, errNotImplemented
}

// GetBySlug returns the plan with the given slug, or ErrNotFound.
func (s *Service) GetBySlug(ctx context.Context, slug string) (Plan, error) {
	return Plan{}, errNotImplemented
}

// Create validates in and stores a new plan. Marking it default or anonymous
// takes that role from the plan that had it, in the same transaction.
// Errors: *ValidationError, ErrSlugTaken.
func (s *Service) Create(ctx context.Context, actor string, in PlanInput) (Plan, error) {
	return Plan{}, errNotImplemented
}

// Update replaces the plan's fields and limits, provided version is still
// the plan's version. Limits keep their ids when their name is unchanged.
// Errors: *ValidationError, ErrNotFound, ErrConflict, ErrSlugTaken.
func (s *Service) Update(ctx context.Context, actor string, id int64, version int, in PlanInput) (Plan, error) {
	return Plan{}, errNotImplemented
}

// Delete removes a plan and its limits. It refuses with ErrInUse while keys or
// developers are assigned the plan, or while it is the default or anonymous
// plan. Errors: ErrNotFound, ErrInUse.
func (s *Service) Delete(ctx context.Context, actor string, id int64) error {
	return errNotImplemented
}

// AddLimit appends a tier to the plan, provided planVersion is current, and
// returns the updated plan (version incremented). Field errors name the
// tier's own fields ("window_seconds"), not a list path.
func (s *Service) AddLimit(ctx context.Context, actor string, planID int64, planVersion int, in LimitInput) (Plan, error) {
	return Plan{}, errNotImplemented
}

// UpdateLimit replaces one tier of the plan, provided planVersion is current.
func (s *Service) UpdateLimit(ctx context.Context, actor string, planID int64, planVersion int, limitID int64, in LimitInput) (Plan, error) {
	return Plan{}, errNotImplemented
}

// DeleteLimit removes one tier of the plan, provided planVersion is current.
func (s *Service) DeleteLimit(ctx context.Context, actor string, planID int64, planVersion int, limitID int64) (Plan, error) {
	return Plan{}, errNotImplemented
}

// Counts returns, per plan id, how many keys and developers are assigned the
// plan directly. Plans with neither are absent from the map.
func (s *Service) Counts(ctx context.Context) (map[int64]PlanCounts, error) {
	return nil, errNotImplemented
}
