package resets_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/resets"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/users"
)

func TestResetLinks(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Postgres(t)
	repo := users.NewRepo(pool)
	u, err := repo.Create(ctx, users.NewUser{Email: "dev@example.com", Password: "a long password", Role: users.RoleDeveloper})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	store := resets.NewStore(pool, time.Hour, clock)

	token, expires, err := store.Create(ctx, pool, "user:1", u.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !expires.Equal(now.Add(time.Hour)) || len(token) < 40 {
		t.Fatalf("token %q expires %v", token, expires)
	}
	var stored int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM password_resets WHERE token_hash = convert_to($1, 'UTF8')`, token).Scan(&stored); err != nil || stored != 0 {
		t.Errorf("the token is stored in clear: %d %v", stored, err)
	}
	if ok, err := store.Valid(ctx, token); !ok || err != nil {
		t.Fatalf("Valid = %v %v", ok, err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO sessions (id_hash, user_id, data, expires_at) VALUES ($1, $2, '', now() + interval '1 hour')`, []byte("0123456789abcdef0123456789abcdef"), u.ID); err != nil {
		t.Fatal(err)
	}

	var fe users.FieldErrors
	if _, err := store.Redeem(ctx, token, "short"); !errors.As(err, &fe) || fe["password"] == "" {
		t.Fatalf("Redeem(short) = %v, want a password field error", err)
	}
	if ok, _ := store.Valid(ctx, token); !ok {
		t.Fatal("a refused password used up the link")
	}

	// Two uses at once: exactly one sets the password.
	var wins atomic.Int32
	var wg sync.WaitGroup
	for _, pw := range []string{"first chosen passphrase", "second chosen passphrase"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := store.Redeem(ctx, token, pw); err == nil {
				wins.Add(1)
			} else if !errors.Is(err, resets.ErrInvalid) {
				t.Errorf("Redeem: %v", err)
			}
		}()
	}
	wg.Wait()
	if wins.Load() != 1 {
		t.Fatalf("%d redeems succeeded, want exactly 1", wins.Load())
	}
	_, err1 := repo.Authenticate(ctx, u.Email, "first chosen passphrase")
	_, err2 := repo.Authenticate(ctx, u.Email, "second chosen passphrase")
	if (err1 == nil) == (err2 == nil) {
		t.Errorf("sign-ins after the reset: %v, %v; want exactly one to work", err1, err2)
	}
	if _, err := repo.Authenticate(ctx, u.Email, "a long password"); err == nil {
		t.Error("the old password still works")
	}
	var sessions int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM sessions WHERE user_id = $1`, u.ID).Scan(&sessions); err != nil || sessions != 0 {
		t.Errorf("%d sessions left (%v), want 0", sessions, err)
	}
	if _, err := store.Redeem(ctx, token, "third chosen passphrase"); !errors.Is(err, resets.ErrInvalid) {
		t.Errorf("used link: %v, want ErrInvalid", err)
	}

	late, _, err := store.Create(ctx, pool, "user:1", u.ID)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	now = now.Add(time.Hour)
	mu.Unlock()
	if ok, _ := store.Valid(ctx, late); ok {
		t.Error("expired link is valid")
	}
	if _, err := store.Redeem(ctx, late, "fourth chosen passphrase"); !errors.Is(err, resets.ErrInvalid) {
		t.Errorf("expired link: %v, want ErrInvalid", err)
	}
	if _, err := store.Redeem(ctx, "not-a-token", "fourth chosen passphrase"); !errors.Is(err, resets.ErrInvalid) {
		t.Errorf("unknown token: %v, want ErrInvalid", err)
	}
	var audited int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE object_id = $1 AND action IN ('user.reset_link', 'user.reset_password')`, strconv.FormatInt(u.ID, 10)).Scan(&audited); err != nil || audited != 3 {
		t.Errorf("%d audit entries (%v), want 2 links and 1 reset", audited, err)
	}
}
