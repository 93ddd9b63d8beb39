package keynotices_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/keynotices"
	"github.com/sluicehq/sluice/internal/mail"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/users"
)

func TestExpiryNotices(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Postgres(t)
	// The first RCPT fails (451): that notice is tried again at the next look.
	smtp := testenv.SMTP(t, testenv.SMTPOptions{FailRcpt: 1})
	sender, err := mail.New(smtp.URL(), "noreply@portal.test", mail.Options{})
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	keys := apikeys.NewService(pool, nil, logger)
	repo := users.NewRepo(pool)
	dev, err := repo.Create(ctx, users.NewUser{Email: "dev@example.com", Password: "a long password", Role: users.RoleDeveloper})
	if err != nil {
		t.Fatal(err)
	}
	paused, err := repo.Create(ctx, users.NewUser{Email: "paused@example.com", Password: "a long password", Role: users.RoleDeveloper})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := repo.SetDisabled(ctx, paused.ID, true); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	in := func(d time.Duration) *time.Time { at := now.Add(d); return &at }
	create := func(owner int64, name string, expires *time.Time) apikeys.Key {
		k, _, err := keys.Create(ctx, "test", apikeys.NewKey{UserID: owner, Name: name, ExpiresAt: expires})
		if err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		return k
	}
	soon := create(dev.ID, "soon", in(3*24*time.Hour))
	create(dev.ID, "later", in(30*24*time.Hour))
	create(dev.ID, "never", nil)
	create(paused.ID, "paused owner", in(2*24*time.Hour))
	revoked := create(dev.ID, "revoked", in(2*24*time.Hour))
	if _, err := pool.Exec(ctx, `UPDATE api_keys SET revoked_at = now() WHERE id = $1`, revoked.ID); err != nil {
		t.Fatal(err)
	}
	gone := create(dev.ID, "expired", in(time.Hour))
	if _, err := pool.Exec(ctx, `UPDATE api_keys SET expires_at = now() - interval '1 hour' WHERE id = $1`, gone.ID); err != nil {
		t.Fatal(err)
	}
	n := keynotices.New(pool, sender, keynotices.Options{PublicURL: "https://portal.test", Logger: logger, Now: func() time.Time { return now }})

	if sent, err := n.RunOnce(ctx); err != nil || sent != 0 {
		t.Fatalf("first look (the server answers 451): sent %d, %v; want 0", sent, err)
	}
	if sent, err := n.RunOnce(ctx); err != nil || sent != 1 {
		t.Fatalf("second look: sent %d, %v; want 1", sent, err)
	}
	got := smtp.Received()
	if len(got) != 1 || got[0].To[0] != "dev@example.com" {
		t.Fatalf("received %+v, want one message to dev@example.com", got)
	}
	if s := got[0].Header("Subject"); s != `Your Sluice API key "soon" expires on `+soon.ExpiresAt.UTC().Format(time.DateOnly) {
		t.Errorf("subject %q", s)
	}
	if b := got[0].Body(); !strings.Contains(b, "https://portal.test/app/keys") || !strings.Contains(b, `"soon" (`) {
		t.Errorf("body:\n%s", b)
	}

	// Several instances looking at once send each notice once.
	create(dev.ID, "raced", in(24*time.Hour+time.Minute))
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := 0
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			other := keynotices.New(pool, sender, keynotices.Options{Logger: logger, Now: func() time.Time { return now }})
			sent, err := other.RunOnce(ctx)
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			total += sent
			mu.Unlock()
		}()
	}
	wg.Wait()
	if total != 1 || len(smtp.Received()) != 2 {
		t.Errorf("4 instances at once sent %d notices (%d received), want 1", total, len(smtp.Received()))
	}
	if sent, _ := n.RunOnce(ctx); sent != 0 {
		t.Errorf("a later look sent %d, want 0: one notice per key", sent)
	}
}
