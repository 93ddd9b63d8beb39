package leased_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/leased"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
)

// clock is a controlled clock shared by the shared store and the instances.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// memTaker leases from a memory store standing in for the shared one: a
// lease is an Allow at the lease's cost, as redisstore.Take is.
type memTaker struct{ *memstore.Store }

func (m memTaker) Take(ctx context.Context, req enforce.Request) (enforce.Decision, error) {
	return m.Store.Allow(ctx, req)
}

func setup(t *testing.T, instances int) (*clock, *memstore.Store, func() *leased.Store) {
	c := &clock{t: time.Unix(1_800_000_000, 0)}
	shared := memstore.New(memstore.Options{Now: c.Now})
	return c, shared, func() *leased.Store {
		s := leased.New(shared, memTaker{shared}, leased.Options{Instances: instances, Now: c.Now})
		t.Cleanup(func() { s.Close() })
		return s
	}
}

func allow(t *testing.T, s enforce.Store, req enforce.Request) enforce.Decision {
	t.Helper()
	d, err := s.Allow(context.Background(), req)
	if err != nil {
		t.Fatalf("Allow: %v", err)
	}
	return d
}

// A leased limit spends its lease in memory: a thousand requests of a hot
// subject cost a few takes, and the instance never admits more than the
// limit in a window.
func TestLeasedSpendsLeasesInMemory(t *testing.T) {
	c, _, open := setup(t, 1)
	s := open()
	l := enforce.Limit{Name: "plan", Algorithm: enforce.FixedWindow, Limit: 10_000, Window: time.Minute, Precision: enforce.PrecisionLeased}
	req := enforce.Request{Subject: "dev:1", Limits: []enforce.Limit{l}}
	for range 1000 {
		if d := allow(t, s, req); !d.Allowed {
			t.Fatalf("refused under the limit: %+v", d)
		}
		c.Add(time.Millisecond)
	}
	if takes := s.Stats().Takes.Load(); takes > 20 || takes < 1 {
		t.Fatalf("%d takes for 1,000 requests, want 1 to 20", takes)
	}
}

// A request refused by its exact layer consumes nothing of its leased one
// (the units go back to the lease), and the reverse.
func TestAllOrNothingAcrossPrecisions(t *testing.T) {
	_, shared, open := setup(t, 1)
	s := open()
	leasedL := enforce.Limit{Name: "plan", Algorithm: enforce.FixedWindow, Limit: 1000, Window: time.Minute, Precision: enforce.PrecisionLeased}
	exact := enforce.Limit{Name: "tier", Algorithm: enforce.FixedWindow, Limit: 2, Window: time.Minute}
	req := enforce.Request{Subject: "dev:1", Limits: []enforce.Limit{leasedL, exact}}
	for i := range 4 {
		d := allow(t, s, req)
		if d.Allowed != (i < 2) {
			t.Fatalf("request %d: allowed %v", i, d.Allowed)
		}
	}
	// Two admitted: the leased layer shows 998 left, lease included.
	d, err := s.Peek(context.Background(), enforce.Request{Subject: "dev:1", Limits: []enforce.Limit{leasedL}})
	if err != nil || d.Layers[0].Remaining != 998 {
		t.Fatalf("leased remaining after 2 admitted and 2 refused = %d (%v), want 998", d.Layers[0].Remaining, err)
	}
	// The reverse: a leased layer that refuses leaves the exact one alone.
	small := enforce.Limit{Name: "small", Algorithm: enforce.FixedWindow, Limit: 1, Window: time.Minute, Precision: enforce.PrecisionLeased}
	wide := enforce.Limit{Name: "wide", Algorithm: enforce.FixedWindow, Limit: 100, Window: time.Minute}
	req = enforce.Request{Subject: "dev:2", Limits: []enforce.Limit{small, wide}}
	allow(t, s, req)
	if d := allow(t, s, req); d.Allowed {
		t.Fatal("a spent leased limit admitted")
	}
	p, _ := shared.Peek(context.Background(), enforce.Request{Subject: "dev:2", Limits: []enforce.Limit{wide}})
	if p.Layers[0].Remaining != 99 {
		t.Fatalf("exact layer remaining %d after one admitted, one refused by the leased layer; want 99", p.Layers[0].Remaining)
	}
}

// Local layers are decided on the instance's share, without the shared
// store, and refunded when the exact layer refuses.
func TestLocalDecidesTheInstanceShare(t *testing.T) {
	_, shared, open := setup(t, 4)
	s := open()
	local := enforce.Limit{Name: "burst", Algorithm: enforce.TokenBucket, Limit: 40, Window: time.Minute, Precision: enforce.PrecisionLocal}
	req := enforce.Request{Subject: "ip:1", Limits: []enforce.Limit{local}}
	n := 0
	for range 50 {
		if allow(t, s, req).Allowed {
			n++
		}
	}
	if n != 10 {
		t.Fatalf("local share of 40 over 4 instances admitted %d, want 10", n)
	}
	// The shared store counts the decisions in its usage series, but holds
	// no state of the local limit.
	if d, _ := shared.Peek(context.Background(), req); d.Layers[0].Remaining != 40 {
		t.Fatalf("the shared store's figure of the local limit is %d, want 40 untouched", d.Layers[0].Remaining)
	}
	exact := enforce.Limit{Name: "tier", Algorithm: enforce.FixedWindow, Limit: 1, Window: time.Minute}
	req = enforce.Request{Subject: "ip:2", Limits: []enforce.Limit{local, exact}}
	allow(t, s, req)
	for range 5 {
		if allow(t, s, req).Allowed {
			t.Fatal("admitted past the exact limit")
		}
	}
	d, _ := s.Peek(context.Background(), enforce.Request{Subject: "ip:2", Limits: []enforce.Limit{local}})
	if d.Layers[0].Remaining != 9 {
		t.Fatalf("local remaining %d after 1 admitted and 5 refused by the exact layer, want 9", d.Layers[0].Remaining)
	}
}

// An edited limit: the next lease follows the new figures, and what the
// old lease held goes back.
func TestLimitEditTakesANewLease(t *testing.T) {
	c, _, open := setup(t, 1)
	s := open()
	l := enforce.Limit{Name: "plan", Algorithm: enforce.SlidingWindowCounter, Limit: 5000, Window: time.Minute, Precision: enforce.PrecisionLeased}
	req := enforce.Request{Subject: "dev:1", Limits: []enforce.Limit{l}}
	allow(t, s, req)
	l.Limit = 3
	req.Limits[0] = l
	n := 0
	for range 10 {
		if allow(t, s, req).Allowed {
			n++
		}
		c.Add(time.Millisecond)
	}
	// One request counted under the old figures, rescaled onto the new.
	if n > 3 {
		t.Fatalf("admitted %d after the limit became 3", n)
	}
}

// Close gives back what is held, so a clean shutdown strands nothing.
func TestCloseGivesBack(t *testing.T) {
	_, shared, open := setup(t, 1)
	s := open()
	l := enforce.Limit{Name: "plan", Algorithm: enforce.TokenBucket, Limit: 10_000, Window: time.Minute, Precision: enforce.PrecisionLeased}
	req := enforce.Request{Subject: "dev:1", Limits: []enforce.Limit{l}}
	allow(t, s, req)
	s.Close()
	d, _ := shared.Peek(context.Background(), req)
	if d.Layers[0].Remaining != 9_999 {
		t.Fatalf("shared remaining after one request and Close = %d, want 9,999", d.Layers[0].Remaining)
	}
}

// A sliding log's leftover cannot be given back, so its lease is kept
// until its entry leaves the window: a subject calling steadily at half a
// lease per lifetime is admitted every request the exact log admits, not
// half of them with the rest stranded in the log.
func TestSlidingLogLeaseOutlivesItsLifetime(t *testing.T) {
	c, _, open := setup(t, 1)
	s := open()
	// A lease of at most 20 lives a second; 10 requests a second.
	l := enforce.Limit{Name: "plan", Algorithm: enforce.SlidingWindowLog, Limit: 1000, Window: 100 * time.Second, Precision: enforce.PrecisionLeased}
	req := enforce.Request{Subject: "dev:1", Limits: []enforce.Limit{l}}
	b := enforce.LeaseBounds(l, 1)
	admitted := int64(0)
	for range 1000 {
		if allow(t, s, req).Allowed {
			admitted++
		}
		c.Add(100 * time.Millisecond)
	}
	if least := l.Limit - b.Under; admitted < least {
		t.Fatalf("admitted %d of 1,000 requests in one window of a limit of 1,000; want at least %d (under-admission %d)", admitted, least, b.Under)
	}
}
