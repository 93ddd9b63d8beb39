package signin_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/signin"
)

// signIn makes an attempt with the right password: it must pass, and its
// success is recorded.
func signIn(t *testing.T, th *signin.Throttle, email string, c signin.Client) {
	t.Helper()
	p, w, err := th.Attempt(t.Context(), email, c)
	if err != nil || w != 0 {
		t.Fatalf("right password from %+v: wait %v, %v", c, w, err)
	}
	if err := th.Succeeded(t.Context(), p); err != nil {
		t.Fatal(err)
	}
}

// guessFromEverywhere fails n times on email, each from a new address,
// 0.15 s apart, waiting out nothing: it returns how many tried a password.
func guessFromEverywhere(t *testing.T, th *signin.Throttle, c *clock, email string, n int, next *int) int {
	t.Helper()
	tried := 0
	for range n {
		*next++
		_, w, err := th.Attempt(t.Context(), email, signin.Client{Addr: addr(fmt.Sprintf("203.0.%d.%d", *next/250, *next%250+1))})
		if err != nil {
			t.Fatal(err)
		}
		if w == 0 {
			tried++
		}
		c.add(150 * time.Millisecond)
	}
	return tried
}

// TestKnownClientsPassTheAccountSlowdown counts, over 45 s of guesses from
// rotating addresses: the owner's device, and the owner's known address,
// get a password try every time; an unknown client waits; the guessers try
// about ten passwords.
func TestKnownClientsPassTheAccountSlowdown(t *testing.T) {
	th, c := newThrottle(t, signin.DefaultPolicy())
	const email = "op@example.com"
	office := signin.Client{Addr: addr("198.51.100.1")}
	laptop := signin.Client{Addr: addr("192.0.2.50"), Device: "laptop-device-id"}
	signIn(t, th, email, office)
	signIn(t, th, email, laptop)
	next, guessed := 0, 0
	deviceIn, officeIn, strangerWaits := 0, 0, 0
	for i := range 15 {
		guessed += guessFromEverywhere(t, th, c, email, 20, &next)
		// The laptop on a new network each time.
		laptop.Addr = addr(fmt.Sprintf("192.0.2.%d", 100+i))
		if w, err := th.Wait(t.Context(), email, laptop); err == nil && w == 0 {
			signIn(t, th, email, laptop)
			deviceIn++
		}
		if w, err := th.Wait(t.Context(), email, office); err == nil && w == 0 {
			signIn(t, th, email, office)
			officeIn++
		}
		if w, err := th.Wait(t.Context(), email, signin.Client{Addr: addr("192.0.2.250")}); err == nil && w > 0 {
			strangerWaits++
		}
	}
	if deviceIn != 15 || officeIn != 15 {
		t.Errorf("signed in from the known device %d and the known address %d of 15 times, want 15 and 15", deviceIn, officeIn)
	}
	if strangerWaits < 14 {
		t.Errorf("an unknown client waited %d of 15 times, want the attack to slow it", strangerWaits)
	}
	if guessed > 12 {
		t.Errorf("%d of %d guesses tried a password, want at most 12", guessed, next)
	}
}

// TestDeviceHasItsOwnBudget: a device token is no master key. Its failures
// are counted under the device, PairFailures per window; past them it is
// an unknown client again.
func TestDeviceHasItsOwnBudget(t *testing.T) {
	p := signin.DefaultPolicy()
	th, c := newThrottle(t, p)
	stolen := signin.Client{Addr: addr("203.0.113.9"), Device: "stolen-id"}
	tried := 0
	for range 3 * p.PairFailures {
		_, w, err := th.Attempt(t.Context(), "op@example.com", stolen)
		if err != nil {
			t.Fatal(err)
		}
		if w == 0 {
			tried++
		}
		c.add(time.Second)
	}
	// PairFailures under the device, then PairFailures under the pair (an
	// unknown client's limit, the account's spacing allowing some).
	if tried < p.PairFailures || tried > 2*p.PairFailures {
		t.Fatalf("a device token tried %d passwords in %d attempts, want from %d to %d", tried, 3*p.PairFailures, p.PairFailures, 2*p.PairFailures)
	}
	// Another device of the account is untouched.
	if w := waitFor(t, th, "op@example.com", signin.Client{Addr: addr("203.0.113.9"), Device: "owner-id"}); w != 0 {
		t.Errorf("another device waits %v", w)
	}
	// The same device id on another account is another device.
	if w := waitFor(t, th, "dev@example.com", stolen); w != 0 {
		t.Errorf("the device on another account waits %v", w)
	}
}

// TestKnownAddressForgotten: an address is known for KnownFor after its
// last successful sign-in, then no longer.
func TestKnownAddressForgotten(t *testing.T) {
	p := signin.DefaultPolicy()
	th, c := newThrottle(t, p)
	office := signin.Client{Addr: addr("198.51.100.1")}
	signIn(t, th, "op@example.com", office)
	c.add(signin.KnownFor + time.Hour)
	signIn(t, th, "op@example.com", signin.Client{Addr: addr("198.51.100.2")})
	next := 0
	guessFromEverywhere(t, th, c, "op@example.com", 10, &next)
	if w := waitFor(t, th, "op@example.com", office); w == 0 {
		t.Error("an address last used past KnownFor still passes the account's slowdown")
	}
	// Known per account: an address of op's is nobody else's.
	if w := waitFor(t, th, "op@example.com", signin.Client{Addr: addr("198.51.100.2")}); w != 0 {
		t.Errorf("a fresh known address waits %v", w)
	}
	guessFromEverywhere(t, th, c, "dev@example.com", 10, &next)
	if w := waitFor(t, th, "dev@example.com", signin.Client{Addr: addr("198.51.100.2")}); w == 0 {
		t.Error("one account's known address passes another account's slowdown")
	}
}

func waitFor(t *testing.T, th *signin.Throttle, email string, c signin.Client) time.Duration {
	t.Helper()
	w, err := th.Wait(t.Context(), email, c)
	if err != nil {
		t.Fatal(err)
	}
	return w
}
