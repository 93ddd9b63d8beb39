package testenv_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/internal/database"
	"github.com/sluicehq/sluice/internal/testenv"
)

func TestPostgres(t *testing.T) {
	ctx := context.Background()

	t.Run("GivesAMigratedDatabaseDroppedAtCleanup", func(t *testing.T) {
		var name string
		t.Run("inner", func(t *testing.T) {
			pool := testenv.Postgres(t)
			if err := pool.QueryRow(ctx, "SELECT current_database()").Scan(&name); err != nil {
				t.Fatal(err)
			}
			if err := database.CheckSchema(ctx, pool); err != nil {
				t.Fatalf("CheckSchema on a fresh test database: %v", err)
			}
			var plans int
			if err := pool.QueryRow(ctx, "SELECT count(*) FROM plans").Scan(&plans); err != nil {
				t.Fatalf("plans table: %v", err)
			}
			if plans != 0 {
				t.Errorf("fresh database has %d plans, want 0", plans)
			}
		})
		conn, err := pgx.Connect(ctx, testenv.PostgresURL(t))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		var exists bool
		if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
			t.Fatal(err)
		}
		if exists {
			t.Errorf("database %s still exists after its test ended", name)
		}
	})

	t.Run("EachCallIsIsolated", func(t *testing.T) {
		a, b := testenv.Postgres(t), testenv.Postgres(t)
		if _, err := a.Exec(ctx, "INSERT INTO plans (slug, name) VALUES ('only-in-a', 'A')"); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := b.QueryRow(ctx, "SELECT count(*) FROM plans").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("second database sees %d plans written to the first, want 0", n)
		}
	})
}

func TestRedis(t *testing.T) {
	ctx := context.Background()

	t.Run("DeletesOnlyPrefixedKeysAtCleanup", func(t *testing.T) {
		outsider, outsiderPrefix := testenv.Redis(t)
		keep := outsiderPrefix + "keep"
		if err := outsider.Set(ctx, keep, "1", 0).Err(); err != nil {
			t.Fatal(err)
		}
		var prefix string
		t.Run("inner", func(t *testing.T) {
			c, p := testenv.Redis(t)
			prefix = p
			for _, k := range []string{"a", "b", "{tag}c"} {
				if err := c.Set(ctx, p+k, "v", 0).Err(); err != nil {
					t.Fatal(err)
				}
			}
		})
		if prefix == outsiderPrefix {
			t.Fatalf("two calls returned the same prefix %q", prefix)
		}
		left, err := outsider.Keys(ctx, prefix+"*").Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(left) != 0 {
			t.Errorf("keys left after cleanup: %v", left)
		}
		if n, err := outsider.Exists(ctx, keep).Result(); err != nil || n != 1 {
			t.Errorf("key of another test: exists=%d err=%v, want 1 <nil>", n, err)
		}
	})
}
