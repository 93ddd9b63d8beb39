package database

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"

	"github.com/golang-migrate/migrate/v4"
	migratepgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sluicehq/sluice/db"
)

// Errors returned (wrapped) by CheckSchema and Migrate. The server refuses to
// serve on any of them; their messages say what the operator should do.
var (
	// ErrDirtySchema means a migration failed halfway: the schema is in an
	// unknown state and needs a person to look at it.
	ErrDirtySchema = errors.New("database schema is dirty")
	// ErrSchemaTooNew means the database was migrated by a newer Sluice than
	// this binary; serving could corrupt data the newer code relies on.
	ErrSchemaTooNew = errors.New("database schema is newer than this program")
	// ErrSchemaTooOld means migrations are pending (only reported when the
	// caller chose not to apply them).
	ErrSchemaTooOld = errors.New("database schema is older than this program")
)

// SchemaState is where a database's schema stands relative to the
// migrations embedded in this binary.
type SchemaState struct {
	// Version is the last applied migration, 0 when none is.
	Version uint
	// Dirty is true when migration Version failed halfway.
	Dirty bool
	// Latest is the newest migration this binary carries.
	Latest uint
}

// LatestVersion returns the number of the newest embedded migration.
func LatestVersion() (uint, error) {
	entries, err := fs.ReadDir(db.Migrations, "migrations")
	if err != nil {
		return 0, fmt.Errorf("read embedded migrations: %w", err)
	}
	var latest uint
	for _, e := range entries {
		num, _, ok := strings.Cut(e.Name(), "_")
		if !ok {
			continue
		}
		v, err := strconv.ParseUint(num, 10, 64)
		if err != nil {
			continue
		}
		latest = max(latest, uint(v))
	}
	if latest == 0 {
		return 0, errors.New("no embedded migrations found")
	}
	return latest, nil
}

// withMigrate runs fn with a golang-migrate instance on pool. Cancelling ctx
// asks migrate to stop after the migration in progress, never in the middle
// of one.
func withMigrate(ctx context.Context, pool *pgxpool.Pool, fn func(m *migrate.Migrate) error) error {
	src, err := iofs.New(db.Migrations, "migrations")
	if err != nil {
		return fmt.Errorf("open embedded migrations: %w", err)
	}
	// Closing this *sql.DB leaves the pool open.
	sqlDB := stdlib.OpenDBFromPool(pool)
	driver, err := migratepgx.WithInstance(sqlDB, &migratepgx.Config{})
	if err != nil {
		_ = sqlDB.Close()
		return fmt.Errorf("prepare migrations: %w", err)
	}
	m, err := migrate.NewWithInstance("iofs", src, "pgx5", driver)
	if err != nil {
		_ = driver.Close()
		return fmt.Errorf("prepare migrations: %w", err)
	}
	defer m.Close()

	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
			m.GracefulStop <- true
		case <-done:
		}
	}()
	return fn(m)
}

// State reports the schema version of the database behind pool.
func State(ctx context.Context, pool *pgxpool.Pool) (SchemaState, error) {
	latest, err := LatestVersion()
	if err != nil {
		return SchemaState{}, err
	}
	st := SchemaState{Latest: latest}
	err = withMigrate(ctx, pool, func(m *migrate.Migrate) error {
		v, dirty, err := m.Version()
		if errors.Is(err, migrate.ErrNilVersion) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read schema version: %w", err)
		}
		st.Version, st.Dirty = v, dirty
		return nil
	})
	return st, err
}

// CheckSchema returns nil when the database is exactly at the newest embedded
// migration, and otherwise an error wrapping ErrDirtySchema, ErrSchemaTooNew
// or ErrSchemaTooOld that says how to fix it.
func CheckSchema(ctx context.Context, pool *pgxpool.Pool) error {
	st, err := State(ctx, pool)
	if err != nil {
		return err
	}
	if err := refuse(st); err != nil {
		return err
	}
	if st.Version < st.Latest {
		return fmt.Errorf("%w: at version %d, this program needs %d; run `portal migrate up`",
			ErrSchemaTooOld, st.Version, st.Latest)
	}
	return nil
}

// refuse returns the error for states no migration may start from.
func refuse(st SchemaState) error {
	if st.Dirty {
		return fmt.Errorf("%w: migration %d failed halfway; repair the schema by hand, then run `portal migrate force %d` (if it is now complete) or `portal migrate force %d` (if it is undone)",
			ErrDirtySchema, st.Version, st.Version, st.Version-1)
	}
	if st.Version > st.Latest {
		return fmt.Errorf("%w: at version %d, this program knows up to %d; run the newer Sluice release that migrated it",
			ErrSchemaTooNew, st.Version, st.Latest)
	}
	return nil
}

// Migrate applies every pending embedded migration and returns the state
// before and after. It refuses a dirty schema or one newer than this binary.
// golang-migrate holds a Postgres advisory lock meanwhile, so several
// instances starting together migrate once.
func Migrate(ctx context.Context, pool *pgxpool.Pool) (before, after SchemaState, err error) {
	before, err = State(ctx, pool)
	if err != nil {
		return before, before, err
	}
	if err := refuse(before); err != nil {
		return before, before, err
	}
	err = withMigrate(ctx, pool, func(m *migrate.Migrate) error {
		if err := m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
			return fmt.Errorf("apply migrations: %w", err)
		}
		return nil
	})
	if err != nil {
		return before, before, err
	}
	after, err = State(ctx, pool)
	return before, after, err
}

// MigrateDown reverts the last steps migrations, or all of them when steps
// is 0 or less. It destroys data; only operators call it, through
// `portal migrate down`.
func MigrateDown(ctx context.Context, pool *pgxpool.Pool, steps int) error {
	return withMigrate(ctx, pool, func(m *migrate.Migrate) error {
		var err error
		if steps <= 0 {
			err = m.Down()
		} else {
			err = m.Steps(-steps)
		}
		if err != nil && !errors.Is(err, migrate.ErrNoChange) {
			return fmt.Errorf("revert migrations: %w", err)
		}
		return nil
	})
}

// ForceVersion records version as applied and clean without running any
// migration: the way out of a dirty schema once a person has repaired it.
// Version -1 records that no migration is applied.
func ForceVersion(ctx context.Context, pool *pgxpool.Pool, version int) error {
	return withMigrate(ctx, pool, func(m *migrate.Migrate) error {
		if err := m.Force(version); err != nil {
			return fmt.Errorf("force schema version %d: %w", version, err)
		}
		return nil
	})
}
