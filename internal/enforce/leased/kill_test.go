package leased_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/leased"
	"github.com/sluicehq/sluice/internal/testenv"
)

// killLimit is the fixed window the kill test runs: 2 instances, so a
// lease is at most 40.
var killLimit = enforce.Limit{Name: "plan", Algorithm: enforce.FixedWindow, Limit: 4000, Window: 4 * time.Second, Precision: enforce.PrecisionLeased}

// TestLeaseHolderProcess is the instance the kill test SIGKILLs: it admits
// requests until it holds a lease with units left, says so, and waits.
func TestLeaseHolderProcess(t *testing.T) {
	prefix := os.Getenv("SLUICE_LEASE_HOLDER_PREFIX")
	if prefix == "" {
		t.Skip("run by TestKilledInstanceStrandsAtMostItsLease")
	}
	// The parent's Redis (a miniredis of its own when the tests run
	// without one is not this process's).
	url := os.Getenv("SLUICE_LEASE_HOLDER_REDIS")
	var s *leased.Store
	lim := killLimit
	if at := os.Getenv("SLUICE_LEASE_HOLDER_AT"); at != "" {
		// The bucket, on the parent's stopped clock.
		ns, err := strconv.ParseInt(at, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		clock := &stepClock{}
		clock.ns.Store(ns)
		s, _ = countedInstanceAt(t, url, prefix, 2, clock.Now, newLedger(clock.Now, killBucket.Algorithm, killBucket.Window))
		lim = killBucket
	} else {
		s = instanceAt(t, url, prefix, 2)
	}
	req := enforce.Request{Subject: "dev:killed", Limits: []enforce.Limit{lim}}
	for i := 1; ; i++ {
		d, err := s.Allow(context.Background(), req)
		if err != nil || !d.Allowed {
			t.Fatalf("holder: %v %+v", err, d)
		}
		if i >= 10 {
			os.Stdout.WriteString("holding " + time.Now().Format(time.RFC3339Nano) + "\n")
			break
		}
	}
	time.Sleep(time.Minute) // killed long before
}

// TestKilledInstanceStrandsAtMostItsLease: an instance SIGKILLed while
// holding a lease takes its units with it until the window ends, never
// more than one lease (the stated under-admission per instance), and the
// window still admits no more than the limit; the next window is whole.
func TestKilledInstanceStrandsAtMostItsLease(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two 4-second windows")
	}
	_, prefix := testenv.Redis(t)
	prefix += "kill:"
	w := killLimit.Window
	var window int64
	for attempt := 1; ; attempt++ {
		// Start just after a window opens, so the holder's lease and the
		// survivors' requests share a window.
		time.Sleep(w - time.Duration(time.Now().UnixNano()%int64(w)) + 50*time.Millisecond)
		window = time.Now().UnixMicro() / w.Microseconds()
		holdAndKill(t, prefix)
		if time.Now().UnixMicro()/w.Microseconds() == window {
			break
		}
		// The holder took a window to start (a loaded machine): its units
		// went with that window. Again, on a fresh subject's window.
		if attempt == 3 {
			t.Fatalf("the holder took more than a window to start, three times")
		}
		t.Logf("attempt %d: the holder outlived its window; again", attempt)
		prefix += "x"
	}

	survivor := instance(t, prefix, 2)
	req := enforce.Request{Subject: "dev:killed", Limits: []enforce.Limit{killLimit}}
	var mu sync.Mutex
	admitted := map[int64]int64{}
	var errs atomic.Int64
	stopAt := time.UnixMicro((window + 2) * w.Microseconds())
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for time.Now().Before(stopAt) {
				d, err := survivor.Allow(context.Background(), req)
				if err != nil {
					errs.Add(1)
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
	if errs.Load() > 0 {
		t.Fatalf("%d decisions failed", errs.Load())
	}
	b := enforce.LeaseBounds(killLimit, 2)
	// The holder admitted 10 and held the rest of its lease when killed.
	got, want := admitted[window]+10, killLimit.Limit
	if got > want || got < want-b.Lease {
		t.Errorf("killed window: holder 10 + survivor %d = %d admitted; want %d - %d (one lease stranded) to %d", admitted[window], got, want, b.Lease, want)
	}
	if next := admitted[window+1]; next > want || next < want-b.Under {
		t.Errorf("next window admitted %d; want %d - %d to %d", next, want, b.Under, want)
	}
	t.Logf("killed window: %d admitted of %d (a lease is at most %d); next window %d", got, want, b.Lease, admitted[window+1])
}

// killBucket is the token bucket the stopped-clock kill test runs: 2
// instances, so a lease is at most 40; a window refills it whole.
var killBucket = enforce.Limit{Name: "plan", Algorithm: enforce.TokenBucket, Limit: 4000, Window: time.Hour, Precision: enforce.PrecisionLeased}

// TestKilledInstanceStrandsAtMostItsLeaseOfABucket: a token bucket's lease
// holder SIGKILLed takes at most its lease with it, until the bucket
// refills. The holder and the survivor run on one stopped clock (Redis's
// included), so the figures are exact counts: Redis has lost at most one
// lease besides the holder's admissions, the survivor is admitted every
// unit Redis has left, and a window later the bucket is whole.
func TestKilledInstanceStrandsAtMostItsLeaseOfABucket(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process to kill")
	}
	_, prefix := testenv.Redis(t)
	clock := &stepClock{}
	clock.ns.Store(time.Unix(1_800_000_000, 0).UnixNano())
	holdAndKill(t, prefix, "SLUICE_LEASE_HOLDER_AT="+strconv.FormatInt(clock.ns.Load(), 10))

	g := newLedger(clock.Now, killBucket.Algorithm, killBucket.Window)
	survivor, rs := countedInstance(t, prefix, 2, clock.Now, g)
	req := enforce.Request{Subject: "dev:killed", Limits: []enforce.Limit{killBucket}}
	ctx := context.Background()
	d, err := rs.Peek(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	b := enforce.LeaseBounds(killBucket, 2)
	left := d.Layers[0].Remaining
	// The holder admitted 10 and held the rest of its leases when killed.
	if stranded := killBucket.Limit - 10 - left; stranded < 1 || stranded > b.Lease {
		t.Errorf("Redis has %d of %d left after the holder admitted 10: %d stranded; want 1 to one lease (%d)", left, killBucket.Limit, stranded, b.Lease)
	}
	drain := func() (admitted int64) {
		for {
			d, err := survivor.Allow(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if !d.Allowed {
				return admitted
			}
			admitted++
		}
	}
	if got := drain(); got != left {
		t.Errorf("the survivor was admitted %d with %d left in Redis", got, left)
	}
	g.step(clock, killBucket.Window)
	if got := drain(); got != killBucket.Limit {
		t.Errorf("a window after the kill the survivor was admitted %d; want the whole bucket, %d", got, killBucket.Limit)
	}
	t.Logf("killed holder: %d stranded of %d (a lease is at most %d)", killBucket.Limit-10-left, killBucket.Limit, b.Lease)
}

// holdAndKill runs TestLeaseHolderProcess on prefix, with env added to its
// environment, until it holds a lease, then SIGKILLs it.
func holdAndKill(t *testing.T, prefix string, env ...string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLeaseHolderProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "SLUICE_LEASE_HOLDER_PREFIX="+prefix, "SLUICE_LEASE_HOLDER_REDIS="+testenv.RedisURL(t))
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
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
		cmd.Process.Kill()
		t.Fatalf("the holder never held a lease: %v", cmd.Wait())
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
}
