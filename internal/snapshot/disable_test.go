package snapshot_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/snapshot"
	"github.com/sluicehq/sluice/internal/users"
)

// TestDisabledDeveloperKeysStopAndRestart: disabling a developer stops every
// key of theirs, every secret included, through NOTIFY alone; enabling them
// restores the same keys. Another developer's keys are untouched.
func TestDisabledDeveloperKeysStopAndRestart(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	h := f.holder(t, snapshot.Options{})
	run(t, h)
	other := f.user(t, "other@example.com", nil)
	k1, s1 := f.key(t, apikeys.NewKey{})
	_, s2 := f.key(t, apikeys.NewKey{})
	_, rotated, err := f.keys.Rotate(ctx, actor, k1.ID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	_, theirs := f.key(t, apikeys.NewKey{UserID: other})
	works := func(secrets ...string) bool {
		for _, s := range secrets {
			if _, err := h.ResolveKey(s); err != nil {
				return false
			}
		}
		return true
	}
	refused := func(secrets ...string) bool {
		for _, s := range secrets {
			if _, err := h.ResolveKey(s); !errors.Is(err, enforce.ErrInvalidKey) {
				return false
			}
		}
		return true
	}
	eventually(t, h, 5*time.Second, func() bool { return works(s1, s2, rotated, theirs) })

	repo := users.NewRepo(f.pool)
	if _, err := repo.SetDisabled(ctx, f.dev, true); err != nil {
		t.Fatal(err)
	}
	eventually(t, h, 5*time.Second, func() bool { return refused(s1, s2, rotated) })
	if !works(theirs) {
		t.Error("disabling one developer stopped another's key")
	}

	if _, err := repo.SetDisabled(ctx, f.dev, false); err != nil {
		t.Fatal(err)
	}
	eventually(t, h, 5*time.Second, func() bool { return works(s1, s2, rotated, theirs) })

	if _, err := repo.SetDisabled(ctx, 999999, true); !errors.Is(err, users.ErrNotFound) {
		t.Errorf("disable an unknown developer: %v, want ErrNotFound", err)
	}
}
