// Package database connects Sluice to its store of record, PostgreSQL: it
// opens the pgx pool, applies and checks the embedded migrations, and can run
// an embedded Postgres server when no DATABASE_URL is configured.
package database

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Open connects a pool to the Postgres server at url and checks that it
// answers. Errors name the host and database but never the password, so they
// are safe to log.
func Open(ctx context.Context, url string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// pgx's parse errors can quote the URL, password included.
		return nil, fmt.Errorf("parse postgres URL: not a valid postgres:// URL or key=value DSN")
	}
	cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	// A short health-check period keeps a pool from handing out connections
	// that died while Postgres restarted.
	cfg.HealthCheckPeriod = 15 * time.Second
	where := fmt.Sprintf("%s:%d/%s", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database)

	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to postgres at %s: %w", where, oneLine{err})
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to postgres at %s: %w", where, oneLine{err})
	}
	return pool, nil
}

// oneLine keeps an error's identity but prints it on one line: pgx lists
// every address it tried on its own line, and a startup failure should read
// as one line in a terminal or a log.
type oneLine struct{ err error }

func (o oneLine) Error() string { return strings.Join(strings.Fields(o.err.Error()), " ") }
func (o oneLine) Unwrap() error { return o.err }
