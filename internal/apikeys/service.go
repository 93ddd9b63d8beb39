package apikeys

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sluicehq/sluice/internal/plans"
)

var errNotImplemented = errors.New("not implemented yet")

// Service manages API keys in Postgres. Every change is audit-logged in the
// same transaction and announced to every instance by NOTIFY triggers.
type Service struct {
	pool   *pgxpool.Pool
	routes []string
	logger *slog.Logger
}

// NewService returns a Service over pool; routes are the ServeMux patterns
// the protected API serves, against which overrides are validated.
func NewService(pool *pgxpool.Pool, routes []string, logger *slog.Logger) *Service {
	return &Service{pool: pool, routes: slices.Clone(routes), logger: logger}
}

// Create issues a key and returns it with its secret. The secret is shown
// this once: only its hash is stored. Errors: *plans.ValidationError.
func (s *Service) Create(ctx context.Context, actor string, in NewKey) (Key, string, error) {
	return Key{}, "", errNotImplemented
}

// Rotate issues a new secret for the key, keeping its identity (counters,
// plan, overrides). The previous secrets stay valid for grace (0 to 24 h).
// Errors: *plans.ValidationError, ErrNotFound, ErrRevoked, ErrExpired.
func (s *Service) Rotate(ctx context.Context, actor string, id int64, grace time.Duration) (Key, string, error) {
	return Key{}, "", errNotImplemented
}

// Revoke ends the key at once, every secret of it included. Revoking a
// revoked key returns ErrRevoked. Errors: ErrNotFound, ErrRevoked.
func (s *Service) Revoke(ctx context.Context, actor string, id int64) error {
	return errNotImplemented
}

// SetOverrides replaces the key's limit overrides, provided version is
// current. Errors: *plans.ValidationError, ErrNotFound, ErrConflict, ErrRevoked.
func (s *Service) SetOverrides(ctx context.Context, actor string, id int64, version int, o []plans.LimitInput) (Key, error) {
	return Key{}, errNotImplemented
}

// SetPlan assigns the key its own plan; nil returns it to its owner's plan.
// Errors: *plans.ValidationError (no such plan), ErrNotFound, ErrRevoked.
func (s *Service) SetPlan(ctx context.Context, actor string, id int64, planID *int64) (Key, error) {
	return Key{}, errNotImplemented
}

// Get returns the key with the given id, or ErrNotFound.
func (s *Service) Get(ctx context.Context, id int64) (Key, error) {
	return Key{}, errNotImplemented
}

// GetForUser returns the key if it belongs to userID, and ErrNotFound
// otherwise, so a developer cannot probe other developers' keys.
func (s *Service) GetForUser(ctx context.Context, userID, id int64) (Key, error) {
	return Key{}, errNotImplemented
}

// List returns one page of the keys matching f, newest first, and the total
// number matching.
func (s *Service) List(ctx context.Context, f Filter) ([]Key, int, error) {
	return nil, 0, errNotImplemented
}
