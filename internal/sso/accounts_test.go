package sso_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/audit"
	"github.com/sluicehq/sluice/internal/sso"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/users"
)

const issuer = "https://idp.example"

func identity(sub, email string) sso.Identity {
	return sso.Identity{Issuer: issuer, Subject: sub, Email: email, EmailVerified: true}
}

func links(t *testing.T, pool *pgxpool.Pool, userID int64) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM sso_identities WHERE user_id = $1`, userID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestAccountsSignIn(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Postgres(t)
	repo := users.NewRepo(pool)
	accounts := sso.NewAccounts(pool)
	var plan int64
	if err := pool.QueryRow(ctx, `INSERT INTO plans (slug, name, is_default) VALUES ('free', 'Free', true) RETURNING id`).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	op, err := repo.Create(ctx, users.NewUser{Email: "Op@Example.com", Password: "correct horse battery", Role: users.RoleOperator})
	if err != nil {
		t.Fatal(err)
	}
	dev, err := repo.Create(ctx, users.NewUser{Email: "dev@example.com", Password: "correct horse battery", Role: users.RoleDeveloper, PlanID: &plan})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("CreatesOperator", func(t *testing.T) {
		res, err := accounts.SignIn(ctx, identity("new-op", "newop@ops.example"), users.RoleOperator, &plan)
		if err != nil {
			t.Fatal(err)
		}
		u := res.User
		if !res.Created || res.Linked || u.Role != users.RoleOperator || u.Email != "newop@ops.example" || u.PlanID != nil {
			t.Fatalf("result = %+v", res)
		}
		// No password opens the account made by SSO.
		for _, pw := range []string{"", "!sso", "correct horse battery"} {
			if _, err := repo.Authenticate(ctx, u.Email, pw); !errors.Is(err, users.ErrBadCredentials) {
				t.Fatalf("password %q on an SSO account: %v", pw, err)
			}
		}
		entries, err := audit.List(ctx, pool, audit.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, e := range entries {
			found = found || (e.Action == "user.sso_create" && e.Actor == "user:"+itoa(u.ID) && e.ObjectID == itoa(u.ID))
		}
		if !found {
			t.Fatalf("no user.sso_create audit entry in %+v", entries)
		}
		// The second sign-in finds the same account by the identity.
		again, err := accounts.SignIn(ctx, identity("new-op", "renamed@ops.example"), users.RoleOperator, &plan)
		if err != nil || again.User.ID != u.ID || again.Created || again.Linked {
			t.Fatalf("second sign-in = %+v, %v", again, err)
		}
	})
	t.Run("CreatesDeveloperOnDefaultPlan", func(t *testing.T) {
		res, err := accounts.SignIn(ctx, identity("new-dev", "newdev@example.org"), users.RoleDeveloper, &plan)
		if err != nil {
			t.Fatal(err)
		}
		if !res.Created || res.User.Role != users.RoleDeveloper || res.User.PlanID == nil || *res.User.PlanID != plan {
			t.Fatalf("result = %+v", res)
		}
	})
	t.Run("ErrNoPlan", func(t *testing.T) {
		_, err := accounts.SignIn(ctx, identity("planless", "planless@example.org"), users.RoleDeveloper, nil)
		if !errors.Is(err, sso.ErrNoPlan) {
			t.Fatalf("err = %v, want ErrNoPlan", err)
		}
		if _, err := repo.ByEmail(ctx, "planless@example.org"); !errors.Is(err, users.ErrNotFound) {
			t.Fatalf("an account was made anyway: %v", err)
		}
	})
	t.Run("LinksByVerifiedEmail", func(t *testing.T) {
		res, err := accounts.SignIn(ctx, identity("op-sub", "op@example.com"), users.RoleOperator, &plan)
		if err != nil {
			t.Fatal(err)
		}
		if res.User.ID != op.ID || !res.Linked || res.Created || links(t, pool, op.ID) != 1 {
			t.Fatalf("result = %+v, links %d", res, links(t, pool, op.ID))
		}
	})
	t.Run("ErrEmailUnverified", func(t *testing.T) {
		id := identity("someone", "dev@example.com")
		id.EmailVerified = false
		if _, err := accounts.SignIn(ctx, id, users.RoleDeveloper, &plan); !errors.Is(err, sso.ErrEmailUnverified) {
			t.Fatalf("err = %v, want ErrEmailUnverified", err)
		}
		if links(t, pool, dev.ID) != 0 {
			t.Fatal("an unverified email was linked")
		}
	})
	t.Run("ErrNoLongerOperator", func(t *testing.T) {
		// The operator linked above, now outside the operator group with
		// developer SSO on.
		_, err := accounts.SignIn(ctx, identity("op-sub", "op@example.com"), users.RoleDeveloper, &plan)
		if !errors.Is(err, sso.ErrNoLongerOperator) {
			t.Fatalf("err = %v, want ErrNoLongerOperator", err)
		}
	})
	t.Run("ErrDeveloperAccount", func(t *testing.T) {
		_, err := accounts.SignIn(ctx, identity("dev-sub", "dev@example.com"), users.RoleOperator, &plan)
		if !errors.Is(err, sso.ErrDeveloperAccount) {
			t.Fatalf("err = %v, want ErrDeveloperAccount", err)
		}
		got, _ := repo.ByID(ctx, dev.ID)
		if got.Role != users.RoleDeveloper || links(t, pool, dev.ID) != 0 {
			t.Fatalf("the developer account changed: %+v, links %d", got, links(t, pool, dev.ID))
		}
	})
	t.Run("ErrDisabled", func(t *testing.T) {
		if _, err := repo.SetDisabled(ctx, dev.ID, true); err != nil {
			t.Fatal(err)
		}
		_, err := accounts.SignIn(ctx, identity("dev-sub", "dev@example.com"), users.RoleDeveloper, &plan)
		if !errors.Is(err, users.ErrDisabled) {
			t.Fatalf("err = %v, want users.ErrDisabled", err)
		}
		if links(t, pool, dev.ID) != 0 {
			t.Fatal("a disabled account was linked")
		}
		if _, err := repo.SetDisabled(ctx, dev.ID, false); err != nil {
			t.Fatal(err)
		}
		res, err := accounts.SignIn(ctx, identity("dev-sub", "dev@example.com"), users.RoleDeveloper, &plan)
		if err != nil || res.User.ID != dev.ID || !res.Linked {
			t.Fatalf("after enabling: %+v, %v", res, err)
		}
	})
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestAccountsSignInConcurrent: first sign-ins of one new person that run
// at once (two tabs, a double click) all sign in to one account, made and
// linked once.
func TestAccountsSignInConcurrent(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Postgres(t)
	accounts := sso.NewAccounts(pool)
	var plan int64
	if err := pool.QueryRow(ctx, `INSERT INTO plans (slug, name, is_default) VALUES ('free', 'Free', true) RETURNING id`).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	t.Run("ParallelSignInsShareOneAccount", func(t *testing.T) {
		const rounds, parallel = 5, 8
		for round := range rounds {
			id := identity("par-"+strconv.Itoa(round), "par"+strconv.Itoa(round)+"@example.org")
			ids := make([]int64, parallel)
			errs := make([]error, parallel)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i := range parallel {
				wg.Go(func() {
					<-start
					res, err := accounts.SignIn(ctx, id, users.RoleDeveloper, &plan)
					ids[i], errs[i] = res.User.ID, err
				})
			}
			close(start)
			wg.Wait()
			for i := range parallel {
				if errs[i] != nil || ids[i] != ids[0] || ids[i] == 0 {
					t.Fatalf("round %d: sign-in %d = user %d, %v (first: user %d)", round, i, ids[i], errs[i], ids[0])
				}
			}
			var accountsMade, created int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM users WHERE lower(email) = lower($1)`, id.Email).Scan(&accountsMade); err != nil {
				t.Fatal(err)
			}
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE action = 'user.sso_create' AND object_id = $1`, itoa(ids[0])).Scan(&created); err != nil {
				t.Fatal(err)
			}
			if accountsMade != 1 || created != 1 || links(t, pool, ids[0]) != 1 {
				t.Fatalf("round %d: %d accounts, %d sso_create entries, %d links", round, accountsMade, created, links(t, pool, ids[0]))
			}
		}
	})
	t.Run("WaitsForTheFirstAndTakesItsAccount", func(t *testing.T) {
		// The first sign-in is held inside its transaction after making
		// the account, so the second meets the unique email for certain.
		id := identity("held", "held@example.org")
		first, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer first.Rollback(ctx)
		var userID int64
		if err := first.QueryRow(ctx, `INSERT INTO users (email, password_hash, role, plan_id) VALUES ($1, '!sso', 'developer', $2) RETURNING id`, id.Email, plan).Scan(&userID); err != nil {
			t.Fatal(err)
		}
		type result struct {
			res sso.SignInResult
			err error
		}
		done := make(chan result, 1)
		go func() {
			res, err := accounts.SignIn(ctx, id, users.RoleDeveloper, &plan)
			done <- result{res, err}
		}()
		// Until the second sign-in waits on the first's row lock.
		for waiting := false; !waiting; {
			if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'INSERT INTO users%')`).Scan(&waiting); err != nil {
				t.Fatal(err)
			}
			select {
			case r := <-done:
				t.Fatalf("the second sign-in finished before the first committed: %+v, %v", r.res, r.err)
			default:
			}
		}
		if _, err := first.Exec(ctx, `INSERT INTO sso_identities (issuer, subject, user_id, email) VALUES ($1, $2, $3, $4)`, id.Issuer, id.Subject, userID, id.Email); err != nil {
			t.Fatal(err)
		}
		if err := first.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		r := <-done
		if r.err != nil || r.res.User.ID != userID || r.res.Created {
			t.Fatalf("second sign-in = %+v, %v; want user %d, not created", r.res, r.err, userID)
		}
		if links(t, pool, userID) != 1 {
			t.Fatalf("%d links", links(t, pool, userID))
		}
	})
}
