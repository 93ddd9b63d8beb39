package database_test

import (
	"context"
	"errors"
	"io/fs"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/db"
	"github.com/sluicehq/sluice/internal/database"
	"github.com/sluicehq/sluice/internal/testenv"
)

func tableCount(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	err := pool.QueryRow(context.Background(),
		`SELECT count(*) FROM information_schema.tables
		 WHERE table_schema = current_schema() AND table_name <> 'schema_migrations'`).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestMigrations(t *testing.T) {
	ctx := context.Background()
	latest, err := database.LatestVersion()
	if err != nil {
		t.Fatal(err)
	}

	t.Run("UpDownUpAgain", func(t *testing.T) {
		pool := testenv.Postgres(t) // already migrated up
		tables := tableCount(t, pool)
		if tables == 0 {
			t.Fatal("no tables after migrating up")
		}
		if err := database.MigrateDown(ctx, pool, 0); err != nil {
			t.Fatalf("down: %v", err)
		}
		st, err := database.State(ctx, pool)
		if err != nil {
			t.Fatal(err)
		}
		if st.Version != 0 || st.Dirty || st.Latest != latest {
			t.Errorf("after down: %+v, want version 0, clean, latest %d", st, latest)
		}
		if n := tableCount(t, pool); n != 0 {
			t.Errorf("%d tables left after migrating down", n)
		}
		before, after, err := database.Migrate(ctx, pool)
		if err != nil {
			t.Fatalf("up again: %v", err)
		}
		if before.Version != 0 || after.Version != latest || after.Dirty {
			t.Errorf("up again: before %+v after %+v, want 0 -> %d clean", before, after, latest)
		}
		if n := tableCount(t, pool); n != tables {
			t.Errorf("%d tables after up again, want %d", n, tables)
		}
		if err := database.CheckSchema(ctx, pool); err != nil {
			t.Errorf("CheckSchema after up again: %v", err)
		}
	})

	t.Run("DownOneStep", func(t *testing.T) {
		pool := testenv.Postgres(t)
		if err := database.MigrateDown(ctx, pool, 1); err != nil {
			t.Fatal(err)
		}
		st, err := database.State(ctx, pool)
		if err != nil {
			t.Fatal(err)
		}
		// Migration numbers may skip (engineers reserve numbers on
		// branches), so one step down lands on the previous file's number.
		if prev := previousVersion(t, latest); st.Version != prev {
			t.Errorf("version after one step down = %d, want %d", st.Version, prev)
		}
	})

	tests := []struct {
		name        string
		force       int
		wantErr     error
		wantMessage string
	}{
		{"RefusesADirtySchema", -2, database.ErrDirtySchema, "portal migrate force"},
		{"RefusesANewerSchema", int(latest) + 1, database.ErrSchemaTooNew, "newer Sluice"},
		{"ReportsAnOlderSchema", int(latest) - 1, database.ErrSchemaTooOld, "portal migrate up"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pool := testenv.Postgres(t)
			if tt.force == -2 {
				// What golang-migrate leaves when a migration fails halfway.
				if _, err := pool.Exec(ctx, "UPDATE schema_migrations SET dirty = true"); err != nil {
					t.Fatal(err)
				}
			} else if err := database.ForceVersion(ctx, pool, tt.force); err != nil {
				t.Fatal(err)
			}
			err := database.CheckSchema(ctx, pool)
			if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.wantMessage) {
				t.Errorf("CheckSchema = %v, want %v saying %q", err, tt.wantErr, tt.wantMessage)
			}
			if tt.wantErr == database.ErrSchemaTooOld {
				return // Migrate's job is to fix exactly this.
			}
			if _, _, err := database.Migrate(ctx, pool); !errors.Is(err, tt.wantErr) {
				t.Errorf("Migrate = %v, want %v", err, tt.wantErr)
			}
		})
	}
}

func TestOpen(t *testing.T) {
	tests := []struct {
		name    string
		url     string
		wantMsg string
	}{
		{"ErrNotAURL", "postgres://%zz", "not a valid postgres"},
		{"ErrNothingListening", "postgres://postgres:s3cret@127.0.0.1:1/x?connect_timeout=2", "connect to postgres at 127.0.0.1:1/x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := database.Open(context.Background(), tt.url)
			if err == nil || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("Open error = %v, want it to contain %q", err, tt.wantMsg)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("error reveals the password: %v", err)
			}
		})
	}
}

// previousVersion is the number of the newest embedded migration before v.
func previousVersion(t *testing.T, v uint) uint {
	t.Helper()
	entries, err := fs.ReadDir(db.Migrations, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	var prev uint
	for _, e := range entries {
		num, _, _ := strings.Cut(e.Name(), "_")
		n, err := strconv.ParseUint(num, 10, 64)
		if err == nil && uint(n) < v {
			prev = max(prev, uint(n))
		}
	}
	return prev
}
