package users_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/users"
)

func TestConfirmedSignup(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Postgres(t)
	repo := users.NewRepo(pool)
	now := time.Now()
	if _, err := repo.Create(ctx, users.NewUser{Email: "taken@example.com", Password: "a long password", Role: users.RoleDeveloper}); err != nil {
		t.Fatal(err)
	}
	confirm := func(token, pw string, at time.Time) (users.User, error) {
		var u users.User
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var err error
			u, err = users.NewRepo(tx).ConfirmSignup(ctx, token, pw, at)
			return err
		})
		return u, err
	}

	t.Run("ErrEmailTaken", func(t *testing.T) {
		if _, _, err := repo.StartSignup(ctx, users.NewUser{Email: "TAKEN@example.com", Password: "another long password"}, now); !errors.Is(err, users.ErrEmailTaken) {
			t.Errorf("StartSignup(registered) = %v, want ErrEmailTaken", err)
		}
	})
	t.Run("ErrFieldErrors", func(t *testing.T) {
		var fe users.FieldErrors
		if _, _, err := repo.StartSignup(ctx, users.NewUser{Email: "new@example.com", Password: "short"}, now); !errors.As(err, &fe) || fe["password"] == "" {
			t.Errorf("StartSignup(short) = %v, want a password field error", err)
		}
	})
	t.Run("NoAccountUntilConfirmed", func(t *testing.T) {
		token, expires, err := repo.StartSignup(ctx, users.NewUser{Email: "new@example.com", Password: "the chosen passphrase"}, now)
		if err != nil {
			t.Fatal(err)
		}
		if !expires.Equal(now.Add(users.SignupTTL)) {
			t.Errorf("expires %v", expires)
		}
		if _, err := repo.ByEmail(ctx, "new@example.com"); !errors.Is(err, users.ErrNotFound) {
			t.Fatalf("an account exists before confirmation: %v", err)
		}
		if _, err := repo.Authenticate(ctx, "new@example.com", "the chosen passphrase"); !errors.Is(err, users.ErrBadCredentials) {
			t.Errorf("sign-in before confirmation = %v, want ErrBadCredentials (as for any unknown email)", err)
		}
		if email, err := repo.PendingSignup(ctx, token, now); err != nil || email != "new@example.com" {
			t.Errorf("PendingSignup = %q, %v", email, err)
		}
		if _, err := confirm(token, "not the chosen one", now); !errors.Is(err, users.ErrBadCredentials) {
			t.Errorf("confirm with another password = %v, want ErrBadCredentials", err)
		}
		u, err := confirm(token, "the chosen passphrase", now)
		if err != nil {
			t.Fatalf("confirm = %v", err)
		}
		if u.Email != "new@example.com" || u.Role != users.RoleDeveloper {
			t.Errorf("made %+v", u)
		}
		if _, err := repo.Authenticate(ctx, "new@example.com", "the chosen passphrase"); err != nil {
			t.Errorf("sign-in after confirmation: %v", err)
		}
		if _, err := confirm(token, "the chosen passphrase", now); !errors.Is(err, users.ErrSignupInvalid) {
			t.Errorf("second use = %v, want ErrSignupInvalid", err)
		}
	})
	t.Run("ErrSignupInvalid", func(t *testing.T) {
		late, _, err := repo.StartSignup(ctx, users.NewUser{Email: "late@example.com", Password: "the chosen passphrase"}, now)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := confirm(late, "the chosen passphrase", now.Add(users.SignupTTL+time.Second)); !errors.Is(err, users.ErrSignupInvalid) {
			t.Errorf("expired = %v, want ErrSignupInvalid", err)
		}
		if _, err := confirm("not-a-token", "the chosen passphrase", now); !errors.Is(err, users.ErrSignupInvalid) {
			t.Errorf("unknown = %v, want ErrSignupInvalid", err)
		}
		// Two pending sign-ups of one address: the first confirmed makes
		// the account, the other no longer works.
		a, _, _ := repo.StartSignup(ctx, users.NewUser{Email: "twice@example.com", Password: "the first passphrase"}, now)
		b, _, _ := repo.StartSignup(ctx, users.NewUser{Email: "twice@example.com", Password: "the second passphrase"}, now)
		if _, err := confirm(b, "the second passphrase", now); err != nil {
			t.Fatal(err)
		}
		if _, err := confirm(a, "the first passphrase", now); !errors.Is(err, users.ErrSignupInvalid) {
			t.Errorf("the other sign-up = %v, want ErrSignupInvalid", err)
		}
	})
}
