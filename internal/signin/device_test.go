package signin_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/signin"
)

func TestDeviceTokens(t *testing.T) {
	d := signin.NewDevices([]byte("0123456789abcdef0123456789abcdef-devices"))
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	ck := d.Remember("Op@Example.com ", "", now)
	id := d.Device("op@example.com", ck, now)
	if id == "" || len(id) != 32 {
		t.Fatalf("device of a fresh cookie: %q", id)
	}
	if got := d.Device("dev@example.com", ck, now); got != "" {
		t.Errorf("the cookie proves another account: %q", got)
	}
	other := signin.NewDevices([]byte("another session secret, 32 bytes at least"))
	if got := other.Device("op@example.com", ck, now); got != "" {
		t.Errorf("a cookie made with another key was accepted: %q", got)
	}
	// Any change to a token breaks it.
	for i := range len(ck) {
		b := []byte(ck)
		b[i] ^= 1
		if got := d.Device("op@example.com", string(b), now); got != "" && string(b) != ck {
			t.Fatalf("a token changed at %d was accepted", i)
		}
	}
	if got := d.Device("op@example.com", ck, now.Add(signin.DeviceLifetime+time.Second)); got != "" {
		t.Errorf("an expired token was accepted")
	}
	// Renewal keeps the id; other accounts' tokens stay, three at most.
	later := now.Add(24 * time.Hour)
	ck2 := d.Remember("dev@example.com", ck, later)
	ck3 := d.Remember("op@example.com", ck2, later)
	if d.Device("op@example.com", ck3, later) != id || d.Device("dev@example.com", ck3, later) != d.Device("dev@example.com", ck2, later) {
		t.Errorf("renewal changed a device id")
	}
	many := ck3
	for _, e := range []string{"a@example.com", "b@example.com", "c@example.com"} {
		many = d.Remember(e, many, later)
	}
	if n := strings.Count(many, ".") + 1; n != 3 {
		t.Errorf("the cookie holds %d tokens, want 3", n)
	}
	if d.Device("c@example.com", many, later) == "" || d.Device("op@example.com", many, later) != "" {
		t.Errorf("the newest account is not kept first, or the oldest not dropped")
	}
	if got := d.Device("op@example.com", "garbage.."+ck, now); got != id {
		t.Errorf("garbage before a valid token: %q", got)
	}
}
