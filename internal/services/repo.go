package services

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/audit"
	"github.com/sluicehq/sluice/internal/plans"
)

// Repo reads and changes services in Postgres. Every change is audit-logged
// in its transaction and announced to every instance by the schema's NOTIFY
// triggers, so the snapshot's Catalog follows within a second.
type Repo struct {
	pool *pgxpool.Pool
}

// NewRepo returns a Repo over pool.
func NewRepo(pool *pgxpool.Pool) *Repo { return &Repo{pool: pool} }

const (
	selectServices = `
SELECT id, slug, name, hosts, upstream_url, version, created_at, updated_at
FROM services`
	selectRoutes = `
SELECT service_id, pattern FROM service_routes ORDER BY service_id, position, id`
)

// LoadAll reads every service with its routes, ordered by slug, through db
// (a pool or the snapshot's transaction).
func LoadAll(ctx context.Context, db audit.DBTX) ([]Service, error) {
	return query(ctx, db, " ORDER BY slug")
}

func query(ctx context.Context, db audit.DBTX, tail string, args ...any) ([]Service, error) {
	rows, err := db.Query(ctx, selectServices+tail, args...)
	if err != nil {
		return nil, fmt.Errorf("select services: %w", err)
	}
	var out []Service
	var s Service
	if _, err := pgx.ForEachRow(rows, []any{&s.ID, &s.Slug, &s.Name, &s.Hosts, &s.Upstream, &s.Version, &s.CreatedAt, &s.UpdatedAt}, func() error {
		if s.Hosts == nil {
			s.Hosts = []string{}
		}
		s.Routes = []string{}
		out = append(out, s)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("select services: %w", err)
	}
	if len(out) == 0 {
		return out, nil
	}
	index := make(map[int64]int, len(out))
	for i := range out {
		index[out[i].ID] = i
	}
	rows, err = db.Query(ctx, selectRoutes)
	if err != nil {
		return nil, fmt.Errorf("select routes: %w", err)
	}
	var id int64
	var pattern string
	if _, err := pgx.ForEachRow(rows, []any{&id, &pattern}, func() error {
		if i, ok := index[id]; ok {
			out[i].Routes = append(out[i].Routes, pattern)
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("select routes: %w", err)
	}
	return out, nil
}

// List returns every service, ordered by slug.
func (r *Repo) List(ctx context.Context) ([]Service, error) { return LoadAll(ctx, r.pool) }

// Get returns the service with the given slug, or ErrNotFound.
func (r *Repo) Get(ctx context.Context, slug string) (Service, error) {
	return get(ctx, r.pool, slug)
}

func get(ctx context.Context, db audit.DBTX, slug string) (Service, error) {
	ss, err := query(ctx, db, " WHERE slug = $1", slug)
	if err != nil {
		return Service{}, err
	}
	if len(ss) == 0 {
		return Service{}, fmt.Errorf("service %q: %w", slug, ErrNotFound)
	}
	return ss[0], nil
}

const (
	// Writers take this lock so that two concurrent edits cannot each
	// add one of two conflicting routes: the check against every other
	// service's routes and the write are then one step.
	lockRoutes    = `LOCK TABLE service_routes IN SHARE ROW EXCLUSIVE MODE`
	insertService = `
INSERT INTO services (slug, name, hosts, upstream_url) VALUES ($1, $2, $3, $4) RETURNING id`
	updateService = `
UPDATE services SET slug = $2, name = $3, hosts = $4, upstream_url = $5,
    version = version + 1, updated_at = now()
WHERE id = $1`
	lockService   = `SELECT version FROM services WHERE slug = $1 FOR UPDATE`
	deleteRoutes  = `DELETE FROM service_routes WHERE service_id = $1`
	insertRoute   = `INSERT INTO service_routes (service_id, pattern, position) VALUES ($1, $2, $3)`
	deleteService = `DELETE FROM services WHERE id = $1`
	// Tiers name routes by pattern; a route a tier names must stay declared.
	selectTiersOn = `
SELECT p.slug || '/' || l.name, l.route FROM plan_limits l JOIN plans p ON p.id = l.plan_id
WHERE l.route = ANY($1) ORDER BY 1 LIMIT 5`
)

// Create validates in and stores a new service. Errors: *plans.ValidationError
// (including a route that conflicts with another service's, or a host
// another service declares), ErrSlugTaken.
func (r *Repo) Create(ctx context.Context, actor string, in Input) (Service, error) {
	in = in.normalized()
	if err := Validate(in); err != nil {
		return Service{}, err
	}
	var created Service
	err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		if err := checkAgainstOthers(ctx, tx, "", in); err != nil {
			return err
		}
		var id int64
		if err := tx.QueryRow(ctx, insertService, in.Slug, in.Name, in.Hosts, in.Upstream).Scan(&id); err != nil {
			return mapWriteError(err)
		}
		if err := writeRoutes(ctx, tx, id, in.Routes); err != nil {
			return err
		}
		s, err := get(ctx, tx, in.Slug)
		if err != nil {
			return err
		}
		created = s
		return audit.Record(ctx, tx, actor, "service.create", audit.ObjectService, strconv.FormatInt(id, 10), nil, s)
	})
	if err != nil {
		return Service{}, fmt.Errorf("create service %q: %w", in.Slug, err)
	}
	return created, nil
}

// Update replaces the service named slug, provided version is still its
// version. Errors: *plans.ValidationError, ErrNotFound, ErrConflict,
// ErrSlugTaken, ErrRouteInUse (a removed route is named by a tier).
func (r *Repo) Update(ctx context.Context, actor, slug string, version int, in Input) (Service, error) {
	in = in.normalized()
	if err := Validate(in); err != nil {
		return Service{}, err
	}
	var updated Service
	err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		before, err := lock(ctx, tx, slug, version)
		if err != nil {
			return err
		}
		if err := checkAgainstOthers(ctx, tx, slug, in); err != nil {
			return err
		}
		var removed []string
		for _, p := range before.Routes {
			if !slices.Contains(in.Routes, p) {
				removed = append(removed, p)
			}
		}
		if err := refuseNamedRoutes(ctx, tx, removed); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, updateService, before.ID, in.Slug, in.Name, in.Hosts, in.Upstream); err != nil {
			return mapWriteError(err)
		}
		if _, err := tx.Exec(ctx, deleteRoutes, before.ID); err != nil {
			return fmt.Errorf("delete routes: %w", err)
		}
		if err := writeRoutes(ctx, tx, before.ID, in.Routes); err != nil {
			return err
		}
		updated, err = get(ctx, tx, in.Slug)
		if err != nil {
			return err
		}
		return audit.Record(ctx, tx, actor, "service.update", audit.ObjectService, strconv.FormatInt(before.ID, 10), before, updated)
	})
	if err != nil {
		return Service{}, fmt.Errorf("update service %q: %w", slug, err)
	}
	return updated, nil
}

// Delete removes the service named slug. Errors: ErrNotFound, ErrRouteInUse.
func (r *Repo) Delete(ctx context.Context, actor, slug string) error {
	err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		before, err := lock(ctx, tx, slug, 0)
		if err != nil {
			return err
		}
		if err := refuseNamedRoutes(ctx, tx, before.Routes); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, deleteService, before.ID); err != nil {
			return fmt.Errorf("delete: %w", err)
		}
		return audit.Record(ctx, tx, actor, "service.delete", audit.ObjectService, strconv.FormatInt(before.ID, 10), before, nil)
	})
	if err != nil {
		return fmt.Errorf("delete service %q: %w", slug, err)
	}
	return nil
}

// lock takes the routes lock and the service's row; version 0 skips the
// optimistic-concurrency check.
func lock(ctx context.Context, tx pgx.Tx, slug string, version int) (Service, error) {
	if _, err := tx.Exec(ctx, lockRoutes); err != nil {
		return Service{}, fmt.Errorf("lock routes: %w", err)
	}
	var current int
	if err := tx.QueryRow(ctx, lockService, slug).Scan(&current); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return Service{}, ErrNotFound
		}
		return Service{}, fmt.Errorf("lock service: %w", err)
	}
	if version != 0 && current != version {
		return Service{}, ErrConflict
	}
	return get(ctx, tx, slug)
}

// checkAgainstOthers refuses routes that conflict with another service's,
// and hosts another service declares, under the routes lock.
func checkAgainstOthers(ctx context.Context, tx pgx.Tx, self string, in Input) error {
	if _, err := tx.Exec(ctx, lockRoutes); err != nil {
		return fmt.Errorf("lock routes: %w", err)
	}
	all, err := LoadAll(ctx, tx)
	if err != nil {
		return err
	}
	var m Mux
	owner := map[string]string{}
	hosts := map[string]string{}
	for _, s := range all {
		if s.Slug == self {
			continue
		}
		for _, p := range s.Routes {
			// Stored routes never conflict with each other.
			_ = m.addStored(p)
			owner[p] = s.Slug
		}
		for _, h := range s.Hosts {
			hosts[h] = s.Slug
		}
	}
	var errs []plans.FieldError
	for i, p := range in.Routes {
		if err := m.Add(p); err != nil {
			errs = append(errs, plans.FieldError{Field: fmt.Sprintf("routes[%d]", i),
				Message: "conflicts with another service's route: " + err.Error()})
		}
	}
	for i, h := range in.Hosts {
		if other, taken := hosts[h]; taken {
			errs = append(errs, plans.FieldError{Field: fmt.Sprintf("hosts[%d]", i),
				Message: fmt.Sprintf("%q is a host of service %q", h, other)})
		}
	}
	if len(errs) > 0 {
		return &plans.ValidationError{Fields: errs}
	}
	return nil
}

func refuseNamedRoutes(ctx context.Context, tx pgx.Tx, routes []string) error {
	if len(routes) == 0 {
		return nil
	}
	rows, err := tx.Query(ctx, selectTiersOn, routes)
	if err != nil {
		return fmt.Errorf("select tiers: %w", err)
	}
	var tier, route string
	var named []string
	if _, err := pgx.ForEachRow(rows, []any{&tier, &route}, func() error {
		named = append(named, fmt.Sprintf("%s names %q", tier, route))
		return nil
	}); err != nil {
		return fmt.Errorf("select tiers: %w", err)
	}
	if len(named) > 0 {
		return fmt.Errorf("%w: %v; change those tiers first", ErrRouteInUse, named)
	}
	return nil
}

func writeRoutes(ctx context.Context, tx pgx.Tx, id int64, routes []string) error {
	for i, p := range routes {
		if _, err := tx.Exec(ctx, insertRoute, id, p, i); err != nil {
			return fmt.Errorf("insert route %q: %w", p, mapWriteError(err))
		}
	}
	return nil
}

func mapWriteError(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.ConstraintName == "services_slug_key" {
		return ErrSlugTaken
	}
	return err
}
