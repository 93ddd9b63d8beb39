package leased

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
)

// memTaker leases from a memory store standing in for the shared one.
type memTaker struct{ *memstore.Store }

func (m memTaker) Take(ctx context.Context, req enforce.Request) (enforce.Decision, error) {
	return m.Store.Allow(ctx, req)
}

type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) Now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Add(d time.Duration) { c.ns.Add(int64(d)) }

// leasesOf is how many leases the store holds for subject.
func leasesOf(s *Store, subject string) int {
	v, ok := s.leases.Load(subject)
	if !ok {
		return 0
	}
	return len(*v.(*subjectLeases).list.Load())
}

// TestSweepForgetsIdleLeases: a subject idle past idleFor has its leases
// given back and forgotten, and its next request takes new ones; deciding
// while the sweep forgets loses no lease, so that every unit not admitted
// goes back to the shared store.
func TestSweepForgetsIdleLeases(t *testing.T) {
	limits := []enforce.Limit{
		{Name: "day", Algorithm: enforce.FixedWindow, Limit: 1_000_000, Window: 24 * time.Hour, Precision: enforce.PrecisionLeased},
		{Name: "per-key", Algorithm: enforce.FixedWindow, Limit: 1_000_000, Window: 24 * time.Hour, Precision: enforce.PrecisionLeased, PerKey: true},
	}
	setup := func(t *testing.T) (*fakeClock, *memstore.Store, *Store) {
		c := &fakeClock{}
		c.ns.Store(time.Date(2026, 12, 7, 1, 0, 0, 0, time.UTC).UnixNano())
		shared := memstore.New(memstore.Options{Now: c.Now})
		s := New(shared, memTaker{shared}, Options{Now: c.Now})
		t.Cleanup(func() { s.Close() })
		return c, shared, s
	}
	allow := func(t *testing.T, s *Store, subject string) bool {
		d, err := s.Allow(context.Background(), enforce.Request{Subject: subject, Key: "k1", Limits: limits})
		if err != nil || !d.Allowed {
			t.Errorf("Allow(%s) = %+v, %v", subject, d, err)
			return false
		}
		return true
	}
	used := func(t *testing.T, shared *memstore.Store, subject string) int64 {
		t.Helper()
		d, err := shared.Peek(context.Background(), enforce.Request{Subject: subject, Key: "k1", Limits: limits})
		if err != nil {
			t.Fatal(err)
		}
		return limits[0].Limit - d.Layers[0].Remaining
	}

	t.Run("IdleSubjectForgotten", func(t *testing.T) {
		c, shared, s := setup(t)
		if !allow(t, s, "user:1") {
			return
		}
		if n := leasesOf(s, "user:1"); n != 2 {
			t.Fatalf("leases after one request = %d, want 2", n)
		}
		c.Add(2 * idleFor)
		s.sweep(c.Now()) // gives the expired leases back
		s.sweep(c.Now()) // forgets them, empty
		if _, ok := s.leases.Load("user:1"); ok {
			t.Fatalf("user:1 still has leases after %s idle", 2*idleFor)
		}
		s.flush()
		if got := used(t, shared, "user:1"); got != 1 {
			t.Fatalf("shared store counts %d used after the give-back, want 1", got)
		}
		allow(t, s, "user:1")
		if n := leasesOf(s, "user:1"); n != 2 || s.stats.Takes.Load() != 4 {
			t.Fatalf("after the next request: %d leases, %d takes; want 2 and 4", n, s.stats.Takes.Load())
		}
	})

	t.Run("DecidingWhileForgettingLosesNoLease", func(t *testing.T) {
		c, shared, s := setup(t)
		subjects := []string{"user:1", "user:2", "user:3"}
		var admitted [3]atomic.Int64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					j := (g + i) % len(subjects)
					if !allow(t, s, subjects[j]) {
						return
					}
					admitted[j].Add(1)
				}
			})
		}
		for range 2000 {
			c.Add(idleFor / 2)
			s.sweep(c.Now())
			runtime.Gosched()
		}
		close(stop)
		wg.Wait()
		s.Close() // gives back every lease it holds
		for j, subject := range subjects {
			if got, want := used(t, shared, subject), admitted[j].Load(); got != want {
				t.Errorf("%s: shared store counts %d used, %d admitted: a lease was lost", subject, got, want)
			}
		}
	})
}
