package main

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/database"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/users"
)

// TestUsersResetPassword resets a password as an operator would from a
// shell: the new password is printed once and works, the old one does not,
// the user's sessions (and only theirs) are gone, and the audit log has the
// reset without the password.
func TestUsersResetPassword(t *testing.T) {
	ctx := context.Background()
	env := baseEnv(t)
	env["DATABASE_URL"] = testenv.PostgresURL(t)
	pool, err := database.Open(ctx, env["DATABASE_URL"])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	repo := users.NewRepo(pool)
	u, err := repo.Create(ctx, users.NewUser{Email: "Lost@Example.com", Password: "the forgotten one", Role: users.RoleOperator})
	if err != nil {
		t.Fatal(err)
	}
	other, err := repo.Create(ctx, users.NewUser{Email: "other@example.com", Password: "still remembered", Role: users.RoleDeveloper})
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range []int64{u.ID, u.ID, other.ID} {
		hash := strings.Repeat(string(rune('a'+i)), 32)
		if _, err := pool.Exec(ctx, `INSERT INTO sessions (id_hash, user_id, data, expires_at) VALUES ($1, $2, '', now() + interval '1 hour')`, []byte(hash), id); err != nil {
			t.Fatal(err)
		}
	}
	portal := func(args ...string) (string, error) {
		var out strings.Builder
		err := run(ctx, append([]string{"portal"}, args...), envOf(env), &out)
		return out.String(), err
	}

	out, err := portal("users", "reset-password", "lost@example.com")
	if err != nil {
		t.Fatalf("reset-password: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`^new password for lost@example.com \(shown once\): (\S+)\nsessions ended: 2\n$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("output %q", out)
	}
	if _, err := repo.Authenticate(ctx, u.Email, m[1]); err != nil {
		t.Errorf("the printed password does not sign in: %v", err)
	}
	if _, err := repo.Authenticate(ctx, u.Email, "the forgotten one"); err == nil {
		t.Error("the old password still signs in")
	}
	var mine, theirs int
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE user_id = $1), count(*) FILTER (WHERE user_id = $2) FROM sessions`, u.ID, other.ID).Scan(&mine, &theirs); err != nil {
		t.Fatal(err)
	}
	if mine != 0 || theirs != 1 {
		t.Errorf("sessions left: %d of the reset user (want 0), %d of another (want 1)", mine, theirs)
	}
	var actor, after string
	if err := pool.QueryRow(ctx, `SELECT actor, after::text FROM audit_log WHERE action = 'user.reset_password' AND object_id = $1`, strconv.FormatInt(u.ID, 10)).Scan(&actor, &after); err != nil {
		t.Fatalf("audit entry: %v", err)
	}
	if actor != "system" || !strings.Contains(after, `"sessions_ended": 2`) || strings.Contains(after, m[1]) {
		t.Errorf("audit entry by %q: %s", actor, after)
	}

	out2, err := portal("users", "reset-password", "lost@example.com")
	if err != nil || strings.Contains(out2, m[1]) {
		t.Errorf("second reset: %v, output %q repeats the first password", err, out2)
	}

	if _, err := portal("users", "reset-password", "nobody@example.com"); err == nil || !strings.Contains(err.Error(), `no user has the email "nobody@example.com"`) {
		t.Errorf("unknown email: %v", err)
	}
	for _, args := range [][]string{{"users"}, {"users", "delete", "x@example.com"}, {"users", "reset-password"}, {"users", "reset-password", "a@example.com", "b@example.com"}} {
		if _, err := portal(args...); err == nil {
			t.Errorf("%v: no error", args)
		} else if _, ok := err.(usageError); !ok {
			t.Errorf("%v: %v is not a usage error", args, err)
		}
	}
}
