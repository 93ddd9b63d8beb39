package testenv

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/db"
	"github.com/sluicehq/sluice/internal/database"
)

// localPostgresAddr is where a machine's own Postgres usually listens.
const localPostgresAddr = "127.0.0.1:5432"

// pgServer is the Postgres server the tests of this binary share and the
// migrated template their databases are cloned from. It is process-wide on
// purpose: starting a server or migrating a template per test would make the
// suite slow, and a test binary is one process.
type pgServer struct {
	adminURL string // a maintenance database on the server
	template string // name of the migrated template database
}

var (
	pgOnce sync.Once
	pgInst *pgServer
	pgErr  error
)

// Postgres returns a pool on a fresh database with every migration applied.
// The database is dropped and the pool closed when the test ends.
func Postgres(t testing.TB) *pgxpool.Pool {
	t.Helper()
	u := PostgresURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, u)
	if err != nil {
		t.Fatalf("testenv: open pool: %v", err)
	}
	// Cleanups run last-in first-out: the pool closes before the database
	// registered by PostgresURL is dropped.
	t.Cleanup(pool.Close)
	return pool
}

// PostgresURL creates a fresh, uniquely named database with every migration
// applied and returns its URL (for code that opens its own pool, such as a
// portal process under test). The database is dropped when the test ends.
func PostgresURL(t testing.TB) string {
	t.Helper()
	pgOnce.Do(func() { pgInst, pgErr = startPostgres() })
	if pgErr != nil {
		t.Fatalf("testenv: postgres: %v", pgErr)
	}
	name := "sluice_test_" + randomSuffix(t, 8)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	create := func() error {
		return pgInst.exec(ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s",
			pgx.Identifier{name}.Sanitize(), pgx.Identifier{pgInst.template}.Sanitize()))
	}
	err := create()
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "3D000" {
		// invalid_catalog_name: a test binary with other migrations dropped
		// our template as stale. Rebuild it once.
		if err = pgInst.prepareTemplate(ctx); err == nil {
			err = create()
		}
	}
	if err != nil {
		t.Fatalf("testenv: create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// FORCE ends sessions a test leaked (a pool it never closed).
		if err := pgInst.exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)",
			pgx.Identifier{name}.Sanitize())); err != nil {
			t.Errorf("testenv: drop database %s: %v", name, err)
		}
	})
	u, err := withDatabase(pgInst.adminURL, name)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return u
}

// startPostgres finds a server and prepares the migrated template.
func startPostgres() (*pgServer, error) {
	adminURL, err := findPostgres(localPostgresAddr)
	if err != nil {
		return nil, err
	}
	s := &pgServer{adminURL: adminURL}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := s.prepareTemplate(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// findPostgres picks the server per the package documentation; local is the
// address of the machine's own server (a parameter so tests can point it at
// nothing).
func findPostgres(local string) (string, error) {
	u := firstEnv("TEST_DATABASE_URL", "DATABASE_URL")
	if u == "embedded" {
		return startEmbedded()
	}
	if u != "" {
		return u, nil
	}
	if reachable(local) {
		localURL := "postgres://postgres@" + local + "/postgres?sslmode=disable"
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, localURL)
		if err == nil {
			_ = conn.Close(ctx)
			return localURL, nil
		}
		if requireServices() {
			return "", fmt.Errorf("%s refuses user postgres: %w", local, err)
		}
	}
	if requireServices() {
		return "", fmt.Errorf("TEST_REQUIRE_SERVICES=1 but TEST_DATABASE_URL and DATABASE_URL are unset and nothing answers on %s", local)
	}
	return startEmbedded()
}

// reachable reports whether something accepts TCP connections at addr.
func reachable(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// exec runs one statement on the maintenance database.
func (s *pgServer) exec(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, s.adminURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

// prepareTemplate makes sure a template database migrated with exactly the
// embedded migrations exists. Its name carries a hash of the migration files,
// so test binaries built from different trees never share a stale template,
// and binaries running in parallel (go test ./... runs packages at once) reuse
// one template. A new template is built under a private name and renamed into
// place, so no binary ever clones a half-migrated one.
//
// Templates of other migration sets are left alone: a checkout with other
// migrations may be testing against them right now. They are small; drop
// them with `DROP DATABASE` when tidying a development server
// (SELECT datname FROM pg_database WHERE datname LIKE 'sluice_tpl_%').
func (s *pgServer) prepareTemplate(ctx context.Context) error {
	sum, err := migrationsHash()
	if err != nil {
		return err
	}
	s.template = "sluice_tpl_" + sum
	return s.publishTemplate(ctx, s.template)
}

// publishTemplate creates the migrated database name unless it exists; safe
// to call from several processes at once.
func (s *pgServer) publishTemplate(ctx context.Context, name string) error {
	conn, err := pgx.Connect(ctx, s.adminURL)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return fmt.Errorf("look for template: %w", err)
	}
	if exists {
		return nil
	}

	buf := make([]byte, 6)
	_, _ = rand.Read(buf)
	building := name + "_" + hex.EncodeToString(buf)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{building}.Sanitize()); err != nil {
		return fmt.Errorf("create template: %w", err)
	}
	dropBuilding := func() {
		_, _ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{building}.Sanitize()+" WITH (FORCE)")
	}
	u, err := withDatabase(s.adminURL, building)
	if err != nil {
		dropBuilding()
		return err
	}
	if err := migrateURL(ctx, u); err != nil {
		dropBuilding()
		return fmt.Errorf("migrate template: %w", err)
	}
	_, err = conn.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s RENAME TO %s",
		pgx.Identifier{building}.Sanitize(), pgx.Identifier{name}.Sanitize()))
	var pgErr *pgconn.PgError
	// Another binary published the same template first: duplicate_database
	// when it had committed, a unique violation on pg_database when both
	// renames ran at once. Either way, its template is the one to use.
	if errors.As(err, &pgErr) && (pgErr.Code == "42P04" || pgErr.Code == "23505") {
		dropBuilding()
		return nil
	}
	if err != nil {
		dropBuilding()
		return fmt.Errorf("publish template: %w", err)
	}
	return nil
}

// migrateURL applies every embedded migration to the database at u.
func migrateURL(ctx context.Context, u string) error {
	pool, err := database.Open(ctx, u)
	if err != nil {
		return err
	}
	defer pool.Close()
	_, _, err = database.Migrate(ctx, pool)
	return err
}

// migrationsHash identifies the embedded migration set.
func migrationsHash() (string, error) {
	entries, err := fs.ReadDir(db.Migrations, "migrations")
	if err != nil {
		return "", fmt.Errorf("read migrations: %w", err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		b, err := fs.ReadFile(db.Migrations, "migrations/"+n)
		if err != nil {
			return "", fmt.Errorf("read migration %s: %w", n, err)
		}
		fmt.Fprintf(h, "%s\x00%d\x00", n, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// withDatabase returns u pointing at database name instead.
func withDatabase(u, name string) (string, error) {
	parsed, err := url.Parse(u)
	if err != nil || (parsed.Scheme != "postgres" && parsed.Scheme != "postgresql") {
		return "", errors.New("the Postgres server URL must be a postgres:// URL")
	}
	parsed.Path = "/" + name
	return parsed.String(), nil
}
