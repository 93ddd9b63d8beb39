package leased_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/leased"
	"github.com/sluicehq/sluice/internal/enforce/redisstore"
	"github.com/sluicehq/sluice/internal/testenv"
)

// stepClock is the clock Redis (redisstore.Options.Now) and the instances
// share in a stepped run: it moves only when the test steps it, so what a
// step's decisions see does not depend on how fast the machine runs them.
type stepClock struct{ ns atomic.Int64 }

func (c *stepClock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

// ledger counts the units the instances lease from Redis, admit and give
// back: per window of a fixed window or sliding counter (by the Redis
// instant each lease was granted at), in one tally for the others. A lease
// only moves units: every unit granted is admitted, given back, forgotten
// by the algorithm (a sliding log's leftover is not refundable), or still
// held.
type ledger struct {
	// snap is held shared by every Take and Refund and alone by a step of
	// the clock, so that each sees one instant.
	snap sync.RWMutex
	// moving counts the Takes and Refunds under way, moved those done: a
	// snapshot that saw neither change saw no unit move.
	moving, moved atomic.Int64
	now           func() time.Time
	alg           enforce.Algorithm
	window        int64 // µs

	mu                                      sync.Mutex
	granted, admitted, refused, given, late map[int64]int64
	forgotten                               []grant // a sliding log's leftovers, at their grant's instant
}

// grant is units at a Redis instant.
type grant struct {
	at    time.Time
	units int64
}

func newLedger(now func() time.Time, alg enforce.Algorithm, window time.Duration) *ledger {
	return &ledger{
		now: now, alg: alg, window: window.Microseconds(),
		granted: map[int64]int64{}, admitted: map[int64]int64{}, refused: map[int64]int64{},
		given: map[int64]int64{}, late: map[int64]int64{},
	}
}

func (g *ledger) idx(t time.Time) int64 { return t.UnixMicro() / g.window }

// key is what the counts of units at t are kept under: their window for a
// fixed window or sliding counter, whose leases end with it; one tally for
// the others, whose leases are spent across windows.
func (g *ledger) key(t time.Time) int64 {
	if g.alg == enforce.FixedWindow || g.alg == enforce.SlidingWindowCounter {
		return g.idx(t)
	}
	return 0
}

// move marks a Take or Refund under way until the function it returns is
// called.
func (g *ledger) move() func() {
	g.snap.RLock()
	g.moving.Add(1)
	return func() {
		g.moved.Add(1)
		g.moving.Add(-1)
		g.snap.RUnlock()
	}
}

// step moves clock on by d, with no lease in flight.
func (g *ledger) step(clock *stepClock, d time.Duration) {
	g.snap.Lock()
	clock.ns.Add(int64(d))
	g.snap.Unlock()
}

// lost returns, once every instance is closed, the units leased that were
// neither admitted, given back nor forgotten, per key that has any.
func (g *ledger) lost() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	for w := range g.granted {
		if o := g.granted[w] - g.admitted[w] - g.given[w] - g.forgottenIn(w); o != 0 {
			out = append(out, fmt.Sprintf("leases of %d: leased %d, admitted %d, given back %d, forgotten %d: %d units lost",
				w, g.granted[w], g.admitted[w], g.given[w], g.forgottenIn(w), o))
		}
	}
	for w, a := range g.admitted {
		if _, ok := g.granted[w]; !ok && a > 0 {
			out = append(out, fmt.Sprintf("leases of %d: %d admitted, none leased", w, a))
		}
	}
	return out
}

// totals sums the counts over every key.
func (g *ledger) totals() (granted, admitted, given, late, forgotten int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for w := range g.granted {
		granted, given, late = granted+g.granted[w], given+g.given[w], late+g.late[w]
	}
	for _, a := range g.admitted {
		admitted += a
	}
	for _, f := range g.forgotten {
		forgotten += f.units
	}
	return granted, admitted, given, late, forgotten
}

// decided counts one caller's decisions of a step.
func (g *ledger) decided(admitted, refused map[int64]int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for w, a := range admitted {
		g.admitted[w] += a
	}
	for w, r := range refused {
		g.refused[w] += r
	}
}

// outstanding is what the leases of key w hold that no caller was admitted
// with and that was not given back or forgotten.
func (g *ledger) outstanding(w int64) int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.granted[w] - g.admitted[w] - g.given[w] - g.forgottenIn(w)
}

func (g *ledger) forgottenIn(w int64) int64 {
	var u int64
	for _, f := range g.forgotten {
		if g.key(f.at) == w {
			u += f.units
		}
	}
	return u
}

// forgottenLive is the leftover of a sliding log's leases still in its
// window at now: entries in Redis that no caller was admitted with.
func (g *ledger) forgottenLive(now time.Time) int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	var u int64
	for _, f := range g.forgotten {
		if f.at.UnixMicro() > now.UnixMicro()-g.window {
			u += f.units
		}
	}
	return u
}

// countingTaker is an instance's Redis store, leasing and giving back
// through the ledger.
type countingTaker struct {
	*redisstore.Store
	g *ledger
}

func (c countingTaker) Take(ctx context.Context, req enforce.Request) (enforce.Decision, error) {
	defer c.g.move()()
	d, err := c.Store.Take(ctx, req)
	if err == nil && d.Allowed {
		c.g.mu.Lock()
		c.g.granted[c.g.key(d.At)] += req.Limits[0].Cost
		c.g.mu.Unlock()
	}
	return d, err
}

func (c countingTaker) Refund(ctx context.Context, req enforce.Request, at time.Time) error {
	defer c.g.move()()
	err := c.Store.Refund(ctx, req, at)
	u, w, now := req.Limits[0].Cost, c.g.key(at), c.g.key(c.g.now())
	c.g.mu.Lock()
	defer c.g.mu.Unlock()
	switch {
	case err == nil:
		c.g.given[w] += u
		// Worth nothing once its window is over (a sliding counter's
		// one window later): the refund rule drops it.
		if (c.g.alg == enforce.FixedWindow && now != w) || (c.g.alg == enforce.SlidingWindowCounter && now > w+1) {
			c.g.late[w] += u
		}
	case errors.Is(err, enforce.ErrNotRefundable):
		c.g.forgotten = append(c.g.forgotten, grant{at, u})
	}
	return err
}

// countedInstance is one instance on the Redis at prefix, leasing through
// g, on the clock now (nil: the real one, Redis's TIME); it returns the
// instance and its Redis store, whose Peek is Redis's own exact answer.
func countedInstance(t *testing.T, prefix string, n int, now func() time.Time, g *ledger) (*leased.Store, *redisstore.Store) {
	t.Helper()
	return countedInstanceAt(t, testenv.RedisURL(t), prefix, n, now, g)
}

// countedInstanceAt is countedInstance on the Redis at url.
func countedInstanceAt(t *testing.T, url, prefix string, n int, now func() time.Time, g *ledger) (*leased.Store, *redisstore.Store) {
	t.Helper()
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(opts)
	// A slow reply on a loaded machine is not an outage here: a lease
	// that could not be taken would be decided exactly, past the ledger.
	rs, err := redisstore.New(client, redisstore.Options{Prefix: prefix, DisableUsage: true, Now: now, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	s := leased.New(rs, countingTaker{rs, g}, leased.Options{Instances: n, Now: now})
	t.Cleanup(func() { s.Close(); rs.Close(); client.Close() })
	return s, rs
}

// TestLeasedUnderAdmitsOnlyWhatLeasesHold: two and four instances on one
// Redis, 64 callers, every leasable algorithm, 20 windows of 8 steps each,
// on a clock that Redis and the instances share and that moves only between
// steps. Within a step each instance's callers ask a random amount (more
// than the limit allows, a little, or nothing), all at once; between steps,
// while no unit moves, the test reads Redis's exact answer and what each
// instance holds. It holds the leases to their lower bound by counting,
// never by timing, so a loaded machine changes nothing it asserts:
//   - after a step in which a request was refused, what Redis still had
//     plus what the instances held (plus a sliding log's leftovers still in
//     its window) is at most the stated under-admission: that is what an
//     exact limit would still have admitted;
//   - a fixed window that refused admits at least the limit minus it;
//   - no caller is admitted with a unit no lease took, and after Close
//     every unit leased was admitted, given back or (a sliding log's
//     leftover) forgotten: under-admission is only ever units a lease
//     holds, never units lost;
//   - after Close, Redis's exact answer for a fixed window or sliding
//     counter is the limit less what the callers were admitted.
func TestLeasedUnderAdmitsOnlyWhatLeasesHold(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 160 steps per algorithm and instance count")
	}
	const (
		// Redis expires a subject's state by its own clock, so the
		// stepped windows are long enough that no step on a loaded
		// machine outlasts what the state has left (a drained leaky
		// bucket's: its burst, 6 minutes); leases live a second.
		window  = time.Hour
		limit   = 1000
		windows = 20
		steps   = 8
		callers = 64
	)
	for _, n := range []int{2, 4} {
		for ai, alg := range enforce.RateAlgorithms {
			t.Run(fmt.Sprintf("%d-instances/%s", n, alg), func(t *testing.T) {
				_, prefix := testenv.Redis(t)
				l := enforce.Limit{Name: "plan", Algorithm: alg, Limit: limit, Window: window, Precision: enforce.PrecisionLeased}
				if alg == enforce.LeakyBucket {
					l.Burst = 100
				}
				if err := enforce.ValidatePrecision(l); err != nil {
					t.Fatal(err)
				}
				b := enforce.LeaseBounds(l, n)
				if b.Lease < 2 {
					t.Fatalf("lease of %d: the test's limit is too small to lease", b.Lease)
				}
				clock := &stepClock{}
				clock.ns.Store(time.Unix(1_800_000_000, 0).UnixNano())
				g := newLedger(clock.Now, alg, window)
				stores := make([]*leased.Store, n)
				var rs *redisstore.Store
				for i := range stores {
					stores[i], rs = countedInstance(t, prefix, n, clock.Now, g)
				}
				req := enforce.Request{Subject: "dev:lower", Limits: []enforce.Limit{l}}
				ctx := context.Background()
				rng := rand.New(rand.NewPCG(uint64(n), uint64(ai)))
				perInstance := callers / n

				var worst int64 // the most withheld after a step that refused
				refusing := 0   // steps that refused
				for step := range windows * steps {
					if step > 0 {
						g.step(clock, window/steps)
					}
					// Each instance's callers ask: more than the limit
					// allows (400 between them), a little, or nothing.
					asks := make([]int, n)
					for i := range asks {
						switch r := rng.IntN(10); {
						case r < 5:
							asks[i] = (400 + perInstance - 1) / perInstance
						case r < 8:
							asks[i] = rng.IntN(2)
						}
					}
					var refusedNow atomic.Int64
					var wg sync.WaitGroup
					for c := range callers {
						s, ask := stores[c%n], asks[c%n]
						wg.Go(func() {
							admitted, refused := map[int64]int64{}, map[int64]int64{}
							for range ask {
								d, err := s.Allow(ctx, req)
								if err != nil {
									t.Error(err)
									return
								}
								if d.Allowed {
									admitted[g.key(d.At)]++
								} else {
									refused[g.key(d.At)]++
									refusedNow.Add(1)
								}
							}
							g.decided(admitted, refused)
						})
					}
					wg.Wait()
					if t.Failed() {
						return
					}

					now := clock.Now()
					w := g.key(now)
					left, held := snapshot(t, g, rs, stores, req)
					for _, s := range stores {
						if f := s.Stats().Fallbacks.Load(); f > 0 {
							t.Fatalf("step %d: %d decisions fell back to exact: a lease could not be taken", step, f)
						}
					}
					if o := g.outstanding(w); o < 0 {
						t.Fatalf("step %d: admitted %d units more than the leases took (window %d)", step, -o, w)
					}
					if refusedNow.Load() == 0 {
						continue
					}
					refusing++
					withheld := left + held
					if alg == enforce.SlidingWindowLog {
						withheld += g.forgottenLive(now)
					}
					worst = max(worst, withheld)
					if withheld > b.Under {
						t.Errorf("step %d refused %d while Redis had %d left and the instances held %d (withheld %d); the stated under-admission is %d",
							step, refusedNow.Load(), left, held, withheld, b.Under)
					}
				}
				if refusing == 0 {
					t.Fatal("no step refused: the callers never reached the limit, so the lower bound went untested")
				}

				// Close gives every lease back: nothing leased is left
				// unaccounted for.
				for _, s := range stores {
					s.Close()
				}
				for _, e := range g.lost() {
					t.Error(e)
				}
				granted, admitted, given, late, forgotten := g.totals()
				g.mu.Lock()
				last := g.idx(clock.Now())
				cur, prev := g.admitted[last], g.admitted[last-1]
				saturated := 0
				least := int64(limit) - b.Under
				for w, r := range g.refused {
					if alg != enforce.FixedWindow || r == 0 {
						continue
					}
					saturated++
					if a := g.admitted[w]; a < least {
						t.Errorf("window %d: admitted %d with %d refused; want at least %d (limit %d - under %d)", w, a, r, least, limit, b.Under)
					}
				}
				g.mu.Unlock()

				p, err := rs.Peek(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				rem := p.Layers[0].Remaining
				switch alg {
				case enforce.FixedWindow:
					if want := limit - cur; rem != want {
						t.Errorf("after Close Redis has %d left; the callers were admitted %d of %d in the window", rem, cur, limit)
					}
				case enforce.SlidingWindowCounter:
					elapsed := clock.Now().UnixMicro() - last*g.window
					est := float64(prev)*float64(g.window-elapsed)/float64(g.window) + float64(cur)
					if want := max(0, int64(math.Floor(limit-est))); rem != want {
						t.Errorf("after Close Redis has %d left; %d and %d admitted in this window and the last leave %d", rem, cur, prev, want)
					}
				}
				t.Logf("%d instances, %s: leased %d, admitted %d, given back %d (%d after their window), forgotten %d; %d steps refused, withholding at most %d (stated %d); %d fixed windows refused",
					n, alg, granted, admitted, given, late, forgotten, refusing, worst, b.Under, saturated)
			})
		}
	}
}

// snapshot reads Redis's exact remaining for req and what the instances
// hold of it together, again until no unit moved while it read (an
// instance's sweep gives back under the lease's lock, so the snapshot waits
// for no lock of the ledger's while it reads what the instances hold).
func snapshot(t *testing.T, g *ledger, rs *redisstore.Store, stores []*leased.Store, req enforce.Request) (left, held int64) {
	t.Helper()
	ctx := context.Background()
	peek := func(s enforce.Store) int64 {
		d, err := s.Peek(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return d.Layers[0].Remaining
	}
	for {
		moved := g.moved.Load()
		if g.moving.Load() > 0 {
			runtime.Gosched()
			continue
		}
		left, held = peek(rs), 0
		for _, s := range stores {
			held += peek(s) - left
		}
		if peek(rs) == left && g.moving.Load() == 0 && g.moved.Load() == moved {
			return left, held
		}
	}
}
