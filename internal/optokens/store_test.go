package optokens_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/optokens"
	"github.com/sluicehq/sluice/internal/testenv"
)

const bootstrapSecret = "bootstrap-token-for-tests-0123456789abcdef"

func insertUser(t *testing.T, pool *pgxpool.Pool, email, role string) int64 {
	t.Helper()
	var id int64
	err := pool.QueryRow(context.Background(),
		`INSERT INTO users (email, password_hash, role) VALUES ($1, 'x', $2) RETURNING id`, email, role).Scan(&id)
	if err != nil {
		t.Fatalf("insert user: %v", err)
	}
	return id
}

func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("count %q: %v", sql, err)
	}
	return n
}

func TestGenerate(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		s, err := optokens.Generate()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(s, optokens.SecretPrefix) || len(s) != len(optokens.SecretPrefix)+43 {
			t.Fatalf("Generate() = %q, want %q plus 43 characters", s, optokens.SecretPrefix)
		}
		if !optokens.WellFormed(s) {
			t.Fatalf("WellFormed(%q) = false for a generated token", s)
		}
		if seen[s] {
			t.Fatalf("Generate returned %q twice", s)
		}
		seen[s] = true
		if p := optokens.PrefixOf(s); p != s[:14] {
			t.Fatalf("PrefixOf(%q) = %q, want %q", s, p, s[:14])
		}
	}
}

func TestWellFormed(t *testing.T) {
	good, err := optokens.Generate()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		secret string
		want   bool
	}{
		{"generated", good, true},
		{"empty", "", false},
		{"developer key", "sk_live_" + good[len(optokens.SecretPrefix):], false},
		{"one character short", good[:len(good)-1], false},
		{"one character long", good + "a", false},
		{"non-base62 character", good[:len(good)-1] + "-", false},
		{"prefix only", optokens.SecretPrefix, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := optokens.WellFormed(tt.secret); got != tt.want {
				t.Errorf("WellFormed(%q) = %v, want %v", tt.secret, got, tt.want)
			}
		})
	}
}

func TestPrincipalActor(t *testing.T) {
	tests := []struct {
		name string
		p    optokens.Principal
		want string
	}{
		{"bootstrap", optokens.Principal{Bootstrap: true}, "bootstrap"},
		{"token", optokens.Principal{TokenID: 42, UserID: 7}, "token:42"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.p.Actor(); got != tt.want {
				t.Errorf("Actor() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestAuthenticate(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Postgres(t)
	store := optokens.NewStore(pool, bootstrapSecret)
	opID := insertUser(t, pool, "op@example.com", "operator")
	demotedID := insertUser(t, pool, "demoted@example.com", "operator")

	live, liveSecret, err := store.Create(ctx, "bootstrap", optokens.NewToken{UserID: opID, Name: "ci"})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	revoked, revokedSecret, err := store.Create(ctx, "bootstrap", optokens.NewToken{UserID: opID, Name: "old"})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if _, err := store.Revoke(ctx, "bootstrap", revoked.ID); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	_, demotedSecret, err := store.Create(ctx, "bootstrap", optokens.NewToken{UserID: demotedID, Name: "x"})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if _, err := pool.Exec(ctx, `UPDATE users SET role = 'developer' WHERE id = $1`, demotedID); err != nil {
		t.Fatal(err)
	}
	unknown, err := optokens.Generate()
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name    string
		store   *optokens.Store
		secret  string
		want    optokens.Principal
		wantErr error
	}{
		{"bootstrap token", store, bootstrapSecret, optokens.Principal{Bootstrap: true}, nil},
		{"live token", store, liveSecret, optokens.Principal{TokenID: live.ID, UserID: opID}, nil},
		{"revoked token", store, revokedSecret, optokens.Principal{}, optokens.ErrInvalidToken},
		{"owner no longer operator", store, demotedSecret, optokens.Principal{}, optokens.ErrInvalidToken},
		{"unknown well-formed token", store, unknown, optokens.Principal{}, optokens.ErrInvalidToken},
		{"malformed", store, "hello", optokens.Principal{}, optokens.ErrInvalidToken},
		{"bootstrap with one character changed", store, bootstrapSecret[:len(bootstrapSecret)-1] + "X", optokens.Principal{}, optokens.ErrInvalidToken},
		{"empty secret without bootstrap", optokens.NewStore(pool, ""), "", optokens.Principal{}, optokens.ErrInvalidToken},
		{"bootstrap disabled", optokens.NewStore(pool, ""), bootstrapSecret, optokens.Principal{}, optokens.ErrInvalidToken},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.store.Authenticate(ctx, tt.secret)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Authenticate error = %v, want %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("Authenticate = %+v, want %+v", got, tt.want)
			}
		})
	}

	t.Run("records last use at most once a minute", func(t *testing.T) {
		tok, err := store.Get(ctx, live.ID)
		if err != nil {
			t.Fatal(err)
		}
		if tok.LastUsedAt == nil {
			t.Fatal("LastUsedAt is nil after a successful Authenticate")
		}
		if _, err := store.Authenticate(ctx, liveSecret); err != nil {
			t.Fatal(err)
		}
		again, err := store.Get(ctx, live.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !again.LastUsedAt.Equal(*tok.LastUsedAt) {
			t.Errorf("LastUsedAt moved from %v to %v within a minute", tok.LastUsedAt, again.LastUsedAt)
		}
	})
}

func TestCreate(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Postgres(t)
	store := optokens.NewStore(pool, "")
	opID := insertUser(t, pool, "op@example.com", "operator")
	devID := insertUser(t, pool, "dev@example.com", "developer")

	t.Run("stores only the hash and audits", func(t *testing.T) {
		tok, secret, err := store.Create(ctx, "token:9", optokens.NewToken{UserID: opID, Name: "  deploy  "})
		if err != nil {
			t.Fatalf("Create: %v", err)
		}
		if tok.Name != "deploy" || tok.UserID != opID || tok.OwnerEmail != "op@example.com" ||
			tok.Prefix != optokens.PrefixOf(secret) || tok.RevokedAt != nil || tok.LastUsedAt != nil || tok.CreatedAt.IsZero() {
			t.Errorf("Create = %+v", tok)
		}
		h := optokens.Hash(secret)
		if n := count(t, pool, `SELECT count(*) FROM operator_tokens WHERE id = $1 AND hash = $2`, tok.ID, h[:]); n != 1 {
			t.Errorf("rows with the secret's hash = %d, want 1", n)
		}
		if n := count(t, pool, `SELECT count(*) FROM operator_tokens WHERE name = $1 OR prefix = $1`, secret); n != 0 {
			t.Errorf("the plain secret is stored in %d rows", n)
		}
		if n := count(t, pool, `SELECT count(*) FROM audit_log WHERE actor = 'token:9' AND action = 'token.create'
			AND object_type = 'token' AND object_id = $1::bigint::text AND before IS NULL AND after->>'name' = 'deploy'
			AND position($2 in after::text) = 0`, tok.ID, secret); n != 1 {
			t.Errorf("audit entries for the creation = %d, want 1", n)
		}
	})

	tests := []struct {
		name string
		in   optokens.NewToken
		want []optokens.FieldError
	}{
		{"empty name", optokens.NewToken{UserID: opID, Name: "  "},
			[]optokens.FieldError{{Field: "name", Message: "must be 1 to 100 characters"}}},
		{"name too long", optokens.NewToken{UserID: opID, Name: strings.Repeat("é", 101)},
			[]optokens.FieldError{{Field: "name", Message: "must be 1 to 100 characters"}}},
		{"no owner", optokens.NewToken{Name: "x"},
			[]optokens.FieldError{{Field: "user_id", Message: "is required"}}},
		{"developer owner", optokens.NewToken{UserID: devID, Name: "x"},
			[]optokens.FieldError{{Field: "user_id", Message: "must be an existing operator"}}},
		{"unknown owner and no name", optokens.NewToken{UserID: 1 << 40},
			[]optokens.FieldError{{Field: "name", Message: "must be 1 to 100 characters"}, {Field: "user_id", Message: "must be an existing operator"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := count(t, pool, `SELECT count(*) FROM operator_tokens`)
			_, secret, err := store.Create(ctx, "bootstrap", tt.in)
			var verr *optokens.ValidationError
			if !errors.As(err, &verr) {
				t.Fatalf("Create error = %v, want a *ValidationError", err)
			}
			if secret != "" {
				t.Errorf("Create returned a secret with an error")
			}
			if len(verr.Fields) != len(tt.want) {
				t.Fatalf("fields = %+v, want %+v", verr.Fields, tt.want)
			}
			for i := range tt.want {
				if verr.Fields[i] != tt.want[i] {
					t.Errorf("field %d = %+v, want %+v", i, verr.Fields[i], tt.want[i])
				}
			}
			if after := count(t, pool, `SELECT count(*) FROM operator_tokens`); after != before {
				t.Errorf("tokens went from %d to %d on a refused create", before, after)
			}
		})
	}
}

func TestListGetRevoke(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Postgres(t)
	store := optokens.NewStore(pool, "")
	opID := insertUser(t, pool, "op@example.com", "operator")

	first, err := store.FirstOperator(ctx)
	if err != nil || first != opID {
		t.Fatalf("FirstOperator = %d, %v; want %d", first, err, opID)
	}

	a, _, err := store.Create(ctx, "bootstrap", optokens.NewToken{UserID: opID, Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := store.Create(ctx, "bootstrap", optokens.NewToken{UserID: opID, Name: "b"})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("list is newest first", func(t *testing.T) {
		toks, err := store.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(toks) != 2 || toks[0].ID != b.ID || toks[1].ID != a.ID {
			t.Errorf("List = %+v, want b then a", toks)
		}
	})
	t.Run("revoke sets revoked_at once and audits once", func(t *testing.T) {
		got, err := store.Revoke(ctx, "token:1", a.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.RevokedAt == nil {
			t.Fatal("RevokedAt is nil after Revoke")
		}
		again, err := store.Revoke(ctx, "token:1", a.ID)
		if err != nil {
			t.Fatalf("second Revoke: %v", err)
		}
		if !again.RevokedAt.Equal(*got.RevokedAt) {
			t.Errorf("second Revoke moved revoked_at from %v to %v", got.RevokedAt, again.RevokedAt)
		}
		if n := count(t, pool, `SELECT count(*) FROM audit_log WHERE action = 'token.revoke' AND object_id = $1::bigint::text AND actor = 'token:1'`, a.ID); n != 1 {
			t.Errorf("revoke audit entries = %d, want 1", n)
		}
	})
	t.Run("unknown id is not found", func(t *testing.T) {
		if _, err := store.Revoke(ctx, "bootstrap", 1<<40); !errors.Is(err, optokens.ErrNotFound) {
			t.Errorf("Revoke(unknown) = %v, want ErrNotFound", err)
		}
		if _, err := store.Get(ctx, 1<<40); !errors.Is(err, optokens.ErrNotFound) {
			t.Errorf("Get(unknown) = %v, want ErrNotFound", err)
		}
	})
}

func TestFirstOperatorWithoutOperators(t *testing.T) {
	pool := testenv.Postgres(t)
	store := optokens.NewStore(pool, "")
	insertUser(t, pool, "dev@example.com", "developer")
	if _, err := store.FirstOperator(context.Background()); !errors.Is(err, optokens.ErrNotFound) {
		t.Errorf("FirstOperator = %v, want ErrNotFound", err)
	}
}
