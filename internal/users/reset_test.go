package users_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/users"
)

func TestGeneratePassword(t *testing.T) {
	seen := map[string]bool{}
	for range 50 {
		pw, err := users.GeneratePassword()
		if err != nil {
			t.Fatal(err)
		}
		if len(pw) != 20 || strings.ContainsAny(pw, "01OIl") {
			t.Fatalf("generated %q: want 20 characters without look-alikes", pw)
		}
		if fe := users.ValidateSignup("someone@example.com", pw); fe != nil {
			t.Fatalf("generated %q is refused by the password rules: %v", pw, fe)
		}
		if seen[pw] {
			t.Fatalf("generated %q twice", pw)
		}
		seen[pw] = true
	}
}

func TestSetPassword(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Postgres(t)
	repo := users.NewRepo(pool)
	u, err := repo.Create(ctx, users.NewUser{Email: "dev@example.com", Password: "a long password", Role: users.RoleDeveloper})
	if err != nil {
		t.Fatal(err)
	}
	var fe users.FieldErrors
	if _, err := repo.SetPassword(ctx, u.ID, "short"); !errors.As(err, &fe) || fe["password"] == "" {
		t.Fatalf("SetPassword(short) = %v, want a FieldErrors on password", err)
	}
	got, err := repo.SetPassword(ctx, u.ID, "a brand new passphrase")
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != u.Version+1 {
		t.Errorf("version %d after the reset, want %d", got.Version, u.Version+1)
	}
	if _, err := repo.Authenticate(ctx, u.Email, "a long password"); !errors.Is(err, users.ErrBadCredentials) {
		t.Errorf("old password still works: %v", err)
	}
	if _, err := repo.Authenticate(ctx, u.Email, "a brand new passphrase"); err != nil {
		t.Errorf("new password refused: %v", err)
	}
	if _, err := repo.SetPassword(ctx, 999999, "a brand new passphrase"); !errors.Is(err, users.ErrNotFound) {
		t.Errorf("SetPassword of a missing user = %v, want ErrNotFound", err)
	}
}
