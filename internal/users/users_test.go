package users_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/users"
)

func TestHashPassword(t *testing.T) {
	h1, err := users.HashPassword("correct horse battery")
	if err != nil {
		t.Fatal(err)
	}
	h2, err := users.HashPassword("correct horse battery")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(h1, "$argon2id$v=19$m=19456,t=2,p=1$") {
		t.Errorf("hash %q is not a PHC argon2id string with the expected parameters", h1)
	}
	if h1 == h2 {
		t.Error("two hashes of one password are equal: the salt is not random")
	}

	tests := []struct {
		name string
		hash string
		pw   string
		want bool
	}{
		{"MatchesTheRightPassword", h1, "correct horse battery", true},
		{"MatchesWithAnotherSalt", h2, "correct horse battery", true},
		{"RejectsAWrongPassword", h1, "correct horse batterz", false},
		{"RejectsAnEmptyPassword", h1, "", false},
		{"RejectsAMalformedHash", "$argon2id$v=19$m=19456,t=2,p=1$bad", "correct horse battery", false},
		{"RejectsAnotherAlgorithm", strings.Replace(h1, "argon2id", "argon2i", 1), "correct horse battery", false},
		{"RejectsAbsurdParameters", strings.Replace(h1, "m=19456", "m=99999999", 1), "correct horse battery", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := users.CheckPassword(tt.hash, tt.pw); got != tt.want {
				t.Errorf("CheckPassword = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestValidateSignupRefusesGuessablePasswords(t *testing.T) {
	const (
		repeated = "must not be one character repeated"
		pattern  = "must not be a short pattern repeated"
		run      = "must not be a run of keys or letters in order"
		email    = "must not be your email address"
		common   = "is too common: it is on the list of the most used passwords"
		padded   = "is too common: a common word with digits or symbols added"
	)
	for _, tt := range []struct{ name, pw, want string }{
		{"CommonWordWithDigits", "password1234", padded},
		{"TwelveSpaces", "            ", "must not be only spaces"},
		{"OneLetterRepeated", "aaaaaaaaaaaa", repeated},
		{"OneAccentedLetterRepeated", "éééééééééééé", repeated},
		{"ShortPatternRepeated", "abcabcabcabc", pattern},
		{"DigitPairsRepeated", "121212121212", pattern},
		{"DigitRun", "123456789012", run},
		{"KeyboardRow", "qwertyuiopas", run},
		{"KeyboardRowBackwards", "lkjhgfdsapoi", run},
		{"ListedPassword", "qwertyqwerty", common},
		{"ListedLong", "passwordpassword", common},
		{"ListedAsIs", "iloveyou123!", padded},
		{"Leet", "P@ssw0rd2024!", padded},
		{"PaddedBothSides", "!!!superman99", padded},
		{"TheEmail", "Developer@Example.com", email},
		{"TheEmailsName", "developer2024", email},
		{"Passphrase", "correct horse battery", ""},
		{"Random", "tq7-vLp2#wz9", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := users.ValidateSignup("developer@example.com", tt.pw)
			if got["password"] != tt.want || len(got) > 1 {
				t.Errorf("ValidateSignup(%q) = %v, want password %q", tt.pw, got, tt.want)
			}
		})
	}
}

func TestValidateSignup(t *testing.T) {
	tests := []struct {
		name      string
		email, pw string
		want      users.FieldErrors
	}{
		{"Valid", "dev@example.com", "twelve chars!", nil},
		{"EmailRequired", "", "twelve chars!", users.FieldErrors{"email": "is required"}},
		{"EmailMalformed", "dev.example.com", "twelve chars!", users.FieldErrors{"email": "is not a valid address (expected name@example.com)"}},
		{"EmailWithDisplayName", "Dev <dev@example.com>", "twelve chars!", users.FieldErrors{"email": "is not a valid address (expected name@example.com)"}},
		{"EmailTooLong", strings.Repeat("a", 250) + "@x.io", "twelve chars!", users.FieldErrors{"email": "must be at most 254 characters"}},
		{"PasswordRequired", "dev@example.com", "", users.FieldErrors{"password": "is required"}},
		{"PasswordTooShort", "dev@example.com", "elevenchars", users.FieldErrors{"password": "must be at least 12 characters"}},
		{"PasswordCountsCharactersNotBytes", "dev@example.com", "née à Zürich", nil},
		{"PasswordTooLong", "dev@example.com", strings.Repeat("p", 1025), users.FieldErrors{"password": "must be at most 1024 bytes"}},
		{"PasswordIsTheEmail", "dev@example.com", "DEV@example.com", users.FieldErrors{"password": "must not be your email address"}},
		{"BothWrong", "nope", "short", users.FieldErrors{"email": "is not a valid address (expected name@example.com)", "password": "must be at least 12 characters"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := users.ValidateSignup(tt.email, tt.pw)
			if len(got) != len(tt.want) {
				t.Fatalf("ValidateSignup = %v, want %v", got, tt.want)
			}
			for field, msg := range tt.want {
				if got[field] != msg {
					t.Errorf("field %s: got %q, want %q", field, got[field], msg)
				}
			}
			if tt.want == nil && got != nil {
				t.Errorf("ValidateSignup = %#v, want nil", got)
			}
		})
	}
	t.Run("ErrorListsFieldsInOrder", func(t *testing.T) {
		got := users.ValidateSignup("nope", "short").Error()
		want := "email: is not a valid address (expected name@example.com); password: must be at least 12 characters"
		if got != want {
			t.Errorf("Error() = %q, want %q", got, want)
		}
	})
}

func TestRepo(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Postgres(t)
	repo := users.NewRepo(pool)

	var planID, otherPlanID int64
	if err := pool.QueryRow(ctx, "INSERT INTO plans (slug, name) VALUES ('free', 'Free') RETURNING id").Scan(&planID); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, "INSERT INTO plans (slug, name) VALUES ('pro', 'Pro') RETURNING id").Scan(&otherPlanID); err != nil {
		t.Fatal(err)
	}

	dev, err := repo.Create(ctx, users.NewUser{Email: " Dev@Example.com ", Password: "a long password", Role: users.RoleDeveloper, PlanID: &planID})
	if err != nil {
		t.Fatal(err)
	}
	op, err := repo.Create(ctx, users.NewUser{Email: "ops@example.com", Password: "another long one", Role: users.RoleOperator})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("CreateReturnsTheStoredUser", func(t *testing.T) {
		if dev.ID == 0 || dev.Email != "Dev@Example.com" || dev.Role != users.RoleDeveloper ||
			dev.PlanID == nil || *dev.PlanID != planID || dev.Version != 1 || dev.CreatedAt.IsZero() || !dev.UpdatedAt.Equal(dev.CreatedAt) {
			t.Errorf("Create = %+v", dev)
		}
		if op.PlanID != nil || op.Role != users.RoleOperator {
			t.Errorf("operator = %+v, want no plan and role operator", op)
		}
	})

	t.Run("CreateErrors", func(t *testing.T) {
		missing := int64(999999)
		tests := []struct {
			name   string
			nu     users.NewUser
			want   error
			fields []string
		}{
			{"ErrEmailTaken", users.NewUser{Email: "dev@example.COM", Password: "a long password", Role: users.RoleDeveloper}, users.ErrEmailTaken, nil},
			{"ErrUnknownPlan", users.NewUser{Email: "x@example.com", Password: "a long password", Role: users.RoleDeveloper, PlanID: &missing}, users.ErrUnknownPlan, nil},
			{"FieldErrors", users.NewUser{Email: "bad", Password: "short", Role: "admin"}, nil, []string{"email", "password", "role"}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				_, err := repo.Create(ctx, tt.nu)
				if tt.want != nil && !errors.Is(err, tt.want) {
					t.Fatalf("Create error = %v, want %v", err, tt.want)
				}
				var fe users.FieldErrors
				if tt.fields != nil {
					if !errors.As(err, &fe) {
						t.Fatalf("Create error = %v, want FieldErrors", err)
					}
					for _, f := range tt.fields {
						if fe[f] == "" {
							t.Errorf("no error for field %s in %v", f, fe)
						}
					}
					if len(fe) != len(tt.fields) {
						t.Errorf("FieldErrors = %v, want exactly %v", fe, tt.fields)
					}
				}
			})
		}
	})

	t.Run("Lookups", func(t *testing.T) {
		tests := []struct {
			name    string
			get     func() (users.User, error)
			wantID  int64
			wantErr error
		}{
			{"ByEmailIgnoresCase", func() (users.User, error) { return repo.ByEmail(ctx, "DEV@EXAMPLE.COM") }, dev.ID, nil},
			{"ByEmailErrNotFound", func() (users.User, error) { return repo.ByEmail(ctx, "nobody@example.com") }, 0, users.ErrNotFound},
			{"ByID", func() (users.User, error) { return repo.ByID(ctx, op.ID) }, op.ID, nil},
			{"ByIDErrNotFound", func() (users.User, error) { return repo.ByID(ctx, -1) }, 0, users.ErrNotFound},
			{"AuthenticateRightPassword", func() (users.User, error) { return repo.Authenticate(ctx, "dev@example.com", "a long password") }, dev.ID, nil},
			{"AuthenticateWrongPassword", func() (users.User, error) { return repo.Authenticate(ctx, "dev@example.com", "a long passwore") }, 0, users.ErrBadCredentials},
			{"AuthenticateUnknownEmail", func() (users.User, error) { return repo.Authenticate(ctx, "who@example.com", "a long password") }, 0, users.ErrBadCredentials},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				u, err := tt.get()
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("error = %v, want %v", err, tt.wantErr)
				}
				if u.ID != tt.wantID {
					t.Errorf("user id = %d, want %d", u.ID, tt.wantID)
				}
			})
		}
	})

	t.Run("List", func(t *testing.T) {
		tests := []struct {
			name string
			f    users.ListFilter
			want []int64
		}{
			{"All", users.ListFilter{}, []int64{dev.ID, op.ID}},
			{"ByRole", users.ListFilter{Role: users.RoleOperator}, []int64{op.ID}},
			{"ByPlan", users.ListFilter{PlanID: &planID}, []int64{dev.ID}},
			{"ByEmailSubstring", users.ListFilter{EmailContains: "OPS@"}, []int64{op.ID}},
			{"Paged", users.ListFilter{Limit: 1, Offset: 1}, []int64{op.ID}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				got, err := repo.List(ctx, tt.f)
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != len(tt.want) {
					t.Fatalf("List returned %d users, want %d", len(got), len(tt.want))
				}
				for i := range got {
					if got[i].ID != tt.want[i] {
						t.Errorf("user %d: id %d, want %d", i, got[i].ID, tt.want[i])
					}
				}
			})
		}
	})

	t.Run("SetPlan", func(t *testing.T) {
		moved, err := repo.SetPlan(ctx, dev.ID, &otherPlanID, dev.Version)
		if err != nil {
			t.Fatal(err)
		}
		if moved.PlanID == nil || *moved.PlanID != otherPlanID || moved.Version != dev.Version+1 || !moved.UpdatedAt.After(dev.UpdatedAt) {
			t.Errorf("SetPlan = %+v", moved)
		}
		missing := int64(999999)
		tests := []struct {
			name    string
			id      int64
			plan    *int64
			version int
			want    error
		}{
			{"ErrConflictOnStaleVersion", dev.ID, &planID, dev.Version, users.ErrConflict},
			{"ErrNotFound", -1, &planID, 1, users.ErrNotFound},
			{"ErrUnknownPlan", dev.ID, &missing, moved.Version, users.ErrUnknownPlan},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				if _, err := repo.SetPlan(ctx, tt.id, tt.plan, tt.version); !errors.Is(err, tt.want) {
					t.Errorf("SetPlan error = %v, want %v", err, tt.want)
				}
			})
		}
	})

	t.Run("WorksInATransaction", func(t *testing.T) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := users.NewRepo(tx).Create(ctx, users.NewUser{Email: "rolled@example.com", Password: "a long password", Role: users.RoleDeveloper}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := repo.ByEmail(ctx, "rolled@example.com"); !errors.Is(err, users.ErrNotFound) {
			t.Errorf("after rollback ByEmail error = %v, want ErrNotFound", err)
		}
	})
}
