package signin_test

import (
	"context"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/signin"
	"github.com/sluicehq/sluice/internal/testenv"
)

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newThrottle(t *testing.T, p signin.Policy) (*signin.Throttle, *clock) {
	c := &clock{t: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)}
	return signin.New(testenv.Postgres(t), p, c.now), c
}

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

func wait(t *testing.T, th *signin.Throttle, email, a string) time.Duration {
	t.Helper()
	w, err := th.Wait(t.Context(), email, signin.Client{Addr: addr(a)})
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	return w
}

// fail makes n attempts that fail, each counted: the test fails if one is
// refused.
func fail(t *testing.T, th *signin.Throttle, email, a string, n int) {
	t.Helper()
	for i := range n {
		_, w, err := th.Attempt(t.Context(), email, signin.Client{Addr: addr(a)})
		if err != nil {
			t.Fatalf("Attempt: %v", err)
		}
		if w != 0 {
			t.Fatalf("attempt %d of %d refused for %v", i+1, n, w)
		}
	}
}

// failWaiting is fail for a caller who waits out the account's spacing.
func failWaiting(t *testing.T, th *signin.Throttle, c *clock, email, a string, n int) {
	t.Helper()
	for counted := 0; counted < n; {
		_, w, err := th.Attempt(t.Context(), email, signin.Client{Addr: addr(a)})
		if err != nil {
			t.Fatalf("Attempt: %v", err)
		}
		if w > time.Minute {
			t.Fatalf("attempt %d refused for %v", counted+1, w)
		}
		if w > 0 {
			c.add(w)
			continue
		}
		counted++
	}
}

func TestPairLimitBlocksOnlyThatAddress(t *testing.T) {
	p := signin.DefaultPolicy()
	p.AccountFreeFailures = 1000 // look at the pair alone
	th, c := newThrottle(t, p)
	fail(t, th, "op@example.com", "192.0.2.1", p.PairFailures-1)
	if w := wait(t, th, "op@example.com", "192.0.2.1"); w != 0 {
		t.Fatalf("after %d failures: wait %v, want 0", p.PairFailures-1, w)
	}
	fail(t, th, "OP@example.com", "192.0.2.1", 1)
	if w := wait(t, th, "op@example.com", "192.0.2.1"); w != p.Window {
		t.Fatalf("after %d failures: wait %v, want the window %v", p.PairFailures, w, p.Window)
	}
	if w := wait(t, th, "op@example.com", "198.51.100.7"); w != 0 {
		t.Errorf("the owner from another address: wait %v, want 0", w)
	}
	if w := wait(t, th, "dev@example.com", "192.0.2.1"); w != 0 {
		t.Errorf("another account from the address: wait %v, want 0", w)
	}
	c.add(p.Window)
	if w := wait(t, th, "op@example.com", "192.0.2.1"); w != 0 {
		t.Errorf("after the window: wait %v, want 0", w)
	}
	fail(t, th, "op@example.com", "192.0.2.1", 1)
	if w := wait(t, th, "op@example.com", "192.0.2.1"); w != 0 {
		t.Errorf("one failure in a new window: wait %v, want 0", w)
	}
}

func TestAddressLimitCountsAllAccounts(t *testing.T) {
	p := signin.DefaultPolicy()
	th, _ := newThrottle(t, p)
	for i := range p.AddressFailures {
		fail(t, th, string(rune('a'+i%26))+"x"+string(rune('a'+i/26))+"@example.com", "192.0.2.9", 1)
	}
	if w := wait(t, th, "fresh@example.com", "192.0.2.9"); w != p.Window {
		t.Fatalf("address spent: wait %v, want %v", w, p.Window)
	}
	if w := wait(t, th, "fresh@example.com", "192.0.2.10"); w != 0 {
		t.Errorf("neighbouring IPv4 address: wait %v, want 0", w)
	}
}

func TestIPv6CountedPerSlash64(t *testing.T) {
	p := signin.DefaultPolicy()
	p.AccountFreeFailures = 1000
	th, _ := newThrottle(t, p)
	for i := range p.PairFailures {
		fail(t, th, "op@example.com", netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 15: byte(i + 1)}).String(), 1)
	}
	if w := wait(t, th, "op@example.com", "2001:db8::ffff"); w != p.Window {
		t.Errorf("same /64, new address: wait %v, want %v", w, p.Window)
	}
	if w := wait(t, th, "op@example.com", "2001:db8:0:1::1"); w != 0 {
		t.Errorf("another /64: wait %v, want 0", w)
	}
	if got := signin.AddressKey(addr("::ffff:192.0.2.1"), enforce.AddressPrefixes{}); got != "ip:192.0.2.1" {
		t.Errorf("AddressKey of a mapped IPv4 = %q", got)
	}
}

// Guesses from many addresses space an account's attempts out, doubling,
// up to the cap: never a lock longer than AccountMaxDelay.
func TestAccountSlowedDownProgressivelyNeverLocked(t *testing.T) {
	p := signin.DefaultPolicy()
	th, c := newThrottle(t, p)
	want := []time.Duration{0, 0, 0, 0, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second,
		16 * time.Second, 32 * time.Second, time.Minute, time.Minute, time.Minute}
	for i, w := range want {
		a := netip.AddrFrom4([4]byte{203, 0, 113, byte(i + 1)}).String()
		fail(t, th, "op@example.com", a, 1)
		if got := wait(t, th, "op@example.com", "198.51.100.1"); got != w {
			t.Fatalf("after failure %d: the owner waits %v, want %v", i+1, got, w)
		}
		c.add(w)
		if got := wait(t, th, "op@example.com", "198.51.100.1"); got != 0 {
			t.Fatalf("after failure %d and waiting %v: still %v", i+1, w, got)
		}
	}
}

func TestSuccessClearsPairAndAccountNotAddress(t *testing.T) {
	p := signin.DefaultPolicy()
	p.AddressFailures = p.PairFailures
	th, c := newThrottle(t, p)
	failWaiting(t, th, c, "op@example.com", "192.0.2.1", p.PairFailures-1)
	// The owner, from another address, waits out the account's spacing;
	// the attempt is counted, then given back by the success.
	c.add(wait(t, th, "op@example.com", "198.51.100.1"))
	owner, w, err := th.Attempt(t.Context(), "op@example.com", signin.Client{Addr: addr("198.51.100.1")})
	if err != nil || w != 0 {
		t.Fatalf("owner's attempt: wait %v, %v", w, err)
	}
	if w := wait(t, th, "op@example.com", "198.51.100.1"); w == 0 {
		t.Fatal("account not slowed after its failures")
	}
	if err := th.Succeeded(t.Context(), owner); err != nil {
		t.Fatal(err)
	}
	if w := wait(t, th, "op@example.com", "203.0.113.50"); w != 0 {
		t.Errorf("after a success: account still slowed by %v", w)
	}
	// One more attempt spends the guessing address's budget; a success
	// from it gives back only its own attempt.
	last, w, err := th.Attempt(t.Context(), "op@example.com", signin.Client{Addr: addr("192.0.2.1")})
	if err != nil || w != 0 {
		t.Fatalf("last attempt: wait %v, %v", w, err)
	}
	if w := wait(t, th, "other@example.com", "192.0.2.1"); w == 0 {
		t.Fatal("address not limited after its failures")
	}
	// (The address limit is spent: an attempt now would wait; the
	// success of an attempt made before is what gives back.)
	if err := th.Succeeded(t.Context(), last); err != nil {
		t.Fatal(err)
	}
	fail(t, th, "other@example.com", "192.0.2.1", 1)
	if w := wait(t, th, "other@example.com", "192.0.2.1"); w == 0 {
		t.Errorf("address budget after a success: not limited again after one more failure (cleared)")
	}
}

// Parallel guesses cannot all pass the check before any is counted: of 40
// concurrent attempts on one pair, exactly PairFailures get to try a
// password.
func TestConcurrentAttemptsCountedExactly(t *testing.T) {
	p := signin.DefaultPolicy()
	p.AccountFreeFailures = 1000
	th, _ := newThrottle(t, p)
	var tried atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, w, err := th.Attempt(context.Background(), "op@example.com", signin.Client{Addr: addr("192.0.2.1")})
			if err != nil {
				errs <- err
				return
			}
			if w == 0 {
				tried.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := tried.Load(); got != int64(p.PairFailures) {
		t.Errorf("%d of 40 parallel attempts tried a password, want exactly %d", got, p.PairFailures)
	}
}

func TestPolicyValidate(t *testing.T) {
	if err := signin.DefaultPolicy().Validate(); err != nil {
		t.Fatalf("default policy: %v", err)
	}
	p := signin.DefaultPolicy()
	p.Window = 0
	if p.Validate() == nil {
		t.Error("zero window accepted")
	}
}
