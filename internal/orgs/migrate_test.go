package orgs_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/database"
	"github.com/sluicehq/sluice/internal/orgs"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/users"
)

// TestMigrationMovesAccountsIntoOrganisations: migration 000039 run on a
// database with accounts and keys in it gives every developer account one
// organisation it owns, and changes nothing of the accounts and keys (so
// no rate-limit subject, and no live counter, changes).
func TestMigrationMovesAccountsIntoOrganisations(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Postgres(t)
	// Back to the schema before organisations.
	if err := database.MigrateDown(ctx, pool, 1); err != nil {
		t.Fatal(err)
	}
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass('organisations') IS NOT NULL`).Scan(&exists); err != nil || exists {
		t.Fatalf("organisations still there after one step down: %v, %v", exists, err)
	}
	var plan int64
	if err := pool.QueryRow(ctx, `INSERT INTO plans (slug, name, is_default) VALUES ('free', 'Free', true) RETURNING id`).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	repo := users.NewRepo(pool)
	keys := apikeys.NewService(pool, nil, slog.New(slog.DiscardHandler))
	var devs []users.User
	for _, email := range []string{"one@example.com", "two@example.com", "three@example.com"} {
		u, err := repo.Create(ctx, users.NewUser{Email: email, Password: "a long passphrase here", Role: users.RoleDeveloper, PlanID: &plan})
		if err != nil {
			t.Fatal(err)
		}
		devs = append(devs, u)
		if _, _, err := keys.Create(ctx, "test", apikeys.NewKey{UserID: u.ID, Name: "main"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := repo.Create(ctx, users.NewUser{Email: "op@example.com", Password: "a long passphrase here", Role: users.RoleOperator}); err != nil {
		t.Fatal(err)
	}
	snapshot := func() string {
		var s string
		if err := pool.QueryRow(ctx, `SELECT string_agg(concat_ws('|', k.id, k.user_id, k.plan_id, k.name, u.plan_id, u.version), ',' ORDER BY k.id)
			FROM api_keys k JOIN users u ON u.id = k.user_id`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := snapshot()

	if _, _, err := database.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if after := snapshot(); after != before {
		t.Fatalf("keys or accounts changed:\nbefore %s\nafter  %s", before, after)
	}
	o := orgs.NewRepo(pool, nil)
	list, err := o.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != len(devs) {
		t.Fatalf("%d organisations for %d developers: %+v", len(list), len(devs), list)
	}
	for _, u := range devs {
		ms, err := o.Memberships(ctx, u.ID)
		if err != nil || len(ms) != 1 || ms[0].AccountUserID != u.ID || ms[0].Role != orgs.RoleOwner || ms[0].Name != u.Email || !ms[0].CreatedAt.Equal(u.CreatedAt) {
			t.Fatalf("developer %s: %+v, %v", u.Email, ms, err)
		}
	}
}
