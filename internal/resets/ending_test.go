package resets_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/resets"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/users"
)

// TestNewerLinkEndsOlder: of two links made for one user, only the newer
// opens (issue 30, item 9).
func TestNewerLinkEndsOlder(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Postgres(t)
	u, err := users.NewRepo(pool).Create(ctx, users.NewUser{Email: "dev@example.com", Password: "a long password", Role: users.RoleDeveloper})
	if err != nil {
		t.Fatal(err)
	}
	other, err := users.NewRepo(pool).Create(ctx, users.NewUser{Email: "other@example.com", Password: "a long password", Role: users.RoleDeveloper})
	if err != nil {
		t.Fatal(err)
	}
	store := resets.NewStore(pool, time.Hour, nil)
	older, _, err := store.Create(ctx, pool, "user:1", u.ID)
	if err != nil {
		t.Fatal(err)
	}
	othersLink, _, err := store.Create(ctx, pool, "user:1", other.ID)
	if err != nil {
		t.Fatal(err)
	}
	newer, _, err := store.Create(ctx, pool, "user:1", u.ID)
	if err != nil {
		t.Fatal(err)
	}
	if ok, _ := store.Valid(ctx, older); ok {
		t.Error("the older link still opens after a newer one was made")
	}
	if _, err := store.Redeem(ctx, older, "chosen through the old link"); !errors.Is(err, resets.ErrInvalid) {
		t.Errorf("Redeem(older) = %v, want ErrInvalid", err)
	}
	if ok, _ := store.Valid(ctx, othersLink); !ok {
		t.Error("a link for another user was ended too")
	}
	if _, err := store.Redeem(ctx, newer, "chosen through the new link"); err != nil {
		t.Errorf("Redeem(newer) = %v, want the password set", err)
	}
}

// TestPasswordChangeEndsLinks: a link made before a password change no
// longer opens, however the password was changed (issue 30, item 9).
func TestPasswordChangeEndsLinks(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Postgres(t)
	repo := users.NewRepo(pool)
	store := resets.NewStore(pool, time.Hour, nil)
	for _, tt := range []struct {
		name   string
		change func(t *testing.T, u users.User)
	}{
		{name: "SettingsChange", change: func(t *testing.T, u users.User) {
			if _, err := repo.ChangePassword(ctx, u.ID, "a long password", "a changed passphrase"); err != nil {
				t.Fatal(err)
			}
		}},
		// The CLI's reset-password and an operator's reset both set the
		// password without the current one.
		{name: "OperatorOrCLISet", change: func(t *testing.T, u users.User) {
			if _, err := repo.SetPassword(ctx, u.ID, "a changed passphrase"); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "AnotherLinkRedeemed", change: func(t *testing.T, u users.User) {
			// Two links open at once, as an older release could leave
			// them (Create now ends the older): redeeming one ends the other.
			const second = "a-second-link-made-by-an-older-release"
			sum := sha256.Sum256([]byte(second))
			if _, err := pool.Exec(ctx, `INSERT INTO password_resets (token_hash, user_id, created_by, expires_at) VALUES ($1, $2, 'user:1', now() + interval '1 hour')`, sum[:], u.ID); err != nil {
				t.Fatal(err)
			}
			if _, err := store.Redeem(ctx, second, "a changed passphrase"); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "DirectUpdate", change: func(t *testing.T, u users.User) {
			hash, err := users.HashPassword("a changed passphrase")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := pool.Exec(ctx, `UPDATE users SET password_hash = $2 WHERE id = $1`, u.ID, hash); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			u, err := repo.Create(ctx, users.NewUser{Email: tt.name + "@example.com", Password: "a long password", Role: users.RoleDeveloper})
			if err != nil {
				t.Fatal(err)
			}
			link, _, err := store.Create(ctx, pool, "user:1", u.ID)
			if err != nil {
				t.Fatal(err)
			}
			tt.change(t, u)
			if ok, _ := store.Valid(ctx, link); ok {
				t.Error("the link still opens after the password changed")
			}
			if _, err := store.Redeem(ctx, link, "chosen through the old link"); !errors.Is(err, resets.ErrInvalid) {
				t.Errorf("Redeem = %v, want ErrInvalid", err)
			}
			if _, err := repo.Authenticate(ctx, u.Email, "a changed passphrase"); err != nil {
				t.Errorf("the changed password no longer works: %v", err)
			}
		})
	}
}
