//go:build chaos

package chaos

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/leased"
	"github.com/sluicehq/sluice/internal/testenv"
)

// The holder's tiers: a leased fixed window (a lease of at most 40 with
// two instances) and a concurrency cap of 3 whose slots last 2 s unless
// renewed.
var (
	killWindow = enforce.Limit{Name: "plan", Algorithm: enforce.FixedWindow, Limit: 4000, Window: 4 * time.Second, Precision: enforce.PrecisionLeased}
	killCap    = enforce.Limit{Name: "inflight", Algorithm: enforce.Concurrency, Limit: 3}
)

const killSlotLease = 2 * time.Second

// leasedInstance is an instance with the lease store in front, as the
// portal wires it: leased -> ledger -> failover -> Redis.
func leasedInstance(t *testing.T, addr string) (*instance, *leased.Store) {
	in := newInstance(t, addr, testenv.Postgres(t), "chaos:")
	lz := leased.New(in.ledger, in.redis, leased.Options{Instances: instances})
	t.Cleanup(func() { _ = lz.Close() })
	return in, lz
}

// TestHolderProcess is the portal instance TestPortalKilledHoldingLeasesAndSlots
// SIGKILLs: it admits 10 requests from a lease, takes two of the three
// slots, says so and waits.
func TestHolderProcess(t *testing.T) {
	addr := os.Getenv("SLUICE_CHAOS_HOLDER_REDIS")
	if addr == "" {
		t.Skip("run by TestPortalKilledHoldingLeasesAndSlots")
	}
	_, lz := leasedInstance(t, addr)
	ctx := context.Background()
	req := enforce.Request{Subject: "dev:holder", Limits: []enforce.Limit{killWindow}}
	for range 10 {
		if d, err := lz.Allow(ctx, req); err != nil || !d.Allowed {
			t.Fatalf("holder: %v %+v", err, d)
		}
	}
	slots := enforce.Request{Subject: "dev:holder", Limits: []enforce.Limit{killCap}}
	for range 2 {
		if _, d, err := lz.AcquireSlots(ctx, slots, killSlotLease); err != nil || !d.Allowed {
			t.Fatalf("holder slots: %v %+v", err, d)
		}
	}
	os.Stdout.WriteString("holding\n")
	time.Sleep(time.Minute)
}

// TestPortalKilledHoldingLeasesAndSlots: an instance holding a lease of a
// leased tier and two of three concurrency slots is SIGKILLed. Its lease's
// units are lost until the window ends, never more than one lease: the
// window admits at most the limit and at least the limit less one lease.
// Its slots are lost until their lease runs out, never longer: at once one
// slot is free, after the slot lease all three, and never more than three
// are held.
func TestPortalKilledHoldingLeasesAndSlots(t *testing.T) {
	r := startRedis(t)
	w := killWindow.Window
	var window int64
	for attempt := 1; ; attempt++ {
		time.Sleep(w - time.Duration(time.Now().UnixNano()%int64(w)) + 50*time.Millisecond)
		window = time.Now().UnixMicro() / w.Microseconds()
		holdAndKill(t, r.addr)
		if time.Now().UnixMicro()/w.Microseconds() == window {
			break
		}
		if attempt == 3 {
			t.Fatal("the holder took more than a window to start, three times")
		}
		c := redis.NewClient(&redis.Options{Addr: r.addr})
		c.FlushAll(context.Background())
		c.Close()
		t.Logf("attempt %d: the holder outlived its window; again on an empty Redis", attempt)
	}
	_, survivor := leasedInstance(t, r.addr)
	ctx := context.Background()

	// Slots: two are the dead holder's until their lease runs out.
	slots := enforce.Request{Subject: "dev:holder", Limits: []enforce.Limit{killCap}}
	free := func() (n int) {
		var held []*enforce.Lease
		for range 4 {
			l, d, err := survivor.AcquireSlots(ctx, slots, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				held = append(held, l)
			}
		}
		for _, l := range held {
			_ = l.Release(ctx)
		}
		return len(held)
	}
	if n := free(); n != 1 {
		t.Errorf("just after the kill: %d slots free, want 1 (two are the dead holder's)", n)
	}

	// The leased window: the survivors take what the holder did not hold.
	req := enforce.Request{Subject: "dev:holder", Limits: []enforce.Limit{killWindow}}
	var mu sync.Mutex
	admitted := map[int64]int64{}
	stopAt := time.UnixMicro((window + 1) * w.Microseconds())
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for time.Now().Before(stopAt) {
				d, err := survivor.Allow(ctx, req)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					mu.Lock()
					admitted[d.At.UnixMicro()/w.Microseconds()]++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	b := enforce.LeaseBounds(killWindow, instances)
	got := admitted[window] + 10
	if got > killWindow.Limit || got < killWindow.Limit-b.Lease {
		t.Errorf("the killed holder's window admitted %d (10 by the holder); want %d - %d to %d", got, killWindow.Limit, b.Lease, killWindow.Limit)
	}
	// By now (a window later) the slots' lease has run out.
	if n := free(); n != 3 {
		t.Errorf("after the slot lease: %d slots free, want 3", n)
	}
	t.Logf("window of the kill: %d admitted of %d (a lease is at most %d); slots free: 1 at once, 3 after %s", got, killWindow.Limit, b.Lease, killSlotLease)
}

// holdAndKill runs TestHolderProcess against the Redis at addr until it
// holds its lease and slots, then SIGKILLs it.
func holdAndKill(t *testing.T, addr string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHolderProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "SLUICE_CHAOS_HOLDER_REDIS="+addr)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	held := false
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "holding") {
			held = true
			break
		}
	}
	if !held {
		_ = cmd.Process.Kill()
		t.Fatalf("the holder never held its lease and slots: %v", cmd.Wait())
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
}
