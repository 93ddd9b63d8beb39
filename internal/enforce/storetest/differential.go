package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"golang.org/x/time/rate"
)

// tick is the arrival grid of the token-bucket differential test: 1/64 s.
// With rates of 2, 4 or 8 per second every token count x/time/rate computes
// is a dyadic fraction, exact in float64, so its float arithmetic and the
// stores' microsecond arithmetic can agree on every decision rather than
// differ by rounding at the boundaries.
const tick = time.Second / 64

func testTokenBucketMatchesXTimeRate(t *testing.T, kinds []Kind) {
	for _, kind := range kinds {
		t.Run(kind.Name, func(t *testing.T) {
			for seed := uint64(1); seed <= 6; seed++ {
				rng := rand.New(rand.NewPCG(seed, 0))
				perSecond := []int64{2, 4, 8}[rng.IntN(3)]
				windowSeconds := int64(1 + rng.IntN(3))
				burst := int64(1 + rng.IntN(10))
				limit := enforce.Limit{Name: "tb", Algorithm: enforce.TokenBucket, Limit: perSecond * windowSeconds, Window: time.Duration(windowSeconds) * time.Second, Burst: burst}
				t.Run(fmt.Sprintf("Seed%d_%dPerSecond_Burst%d", seed, perSecond, burst), func(t *testing.T) {
					clock := NewClock()
					store := kind.New(t, clock)
					oracle := rate.NewLimiter(rate.Limit(perSecond), int(burst))
					now := Epoch
					admitted := 0
					for i := 0; i < 300; i++ {
						now = now.Add(time.Duration(rng.IntN(20)) * tick)
						cost := int64(1 + rng.IntN(3))
						clock.Set(now)
						l := limit
						l.Cost = cost
						d, err := store.Allow(context.Background(), enforce.Request{Subject: "key:diff", Limits: []enforce.Limit{l}})
						if err != nil {
							t.Fatal(err)
						}
						want := oracle.AllowN(now, int(cost))
						if d.Allowed != want {
							t.Fatalf("request %d (cost %d at +%s): store Allowed=%v, x/time/rate %v",
								i, cost, now.Sub(Epoch), d.Allowed, want)
						}
						// Remaining is the whole tokens x/time/rate holds after
						// the decision.
						if tokens := int64(oracle.TokensAt(now)); d.Layers[0].Remaining != tokens {
							t.Fatalf("request %d: Remaining=%d, x/time/rate holds %d tokens", i, d.Layers[0].Remaining, tokens)
						}
						if d.Allowed {
							admitted++
						}
					}
					if admitted == 0 || admitted == 300 {
						t.Fatalf("admitted %d of 300: the sequence never exercised both outcomes", admitted)
					}
				})
			}
		})
	}
}

// bruteLog is the sliding log by definition: admitted requests and a sum
// over (now-W, now].
type bruteLog struct {
	limit, window int64
	entries       []enforce.LogEntry
}

func (b *bruteLog) allow(now, cost int64) (bool, int64) {
	var sum int64
	for _, e := range b.entries {
		if e.TS > now-b.window && e.TS <= now {
			sum += e.Cost
		}
	}
	if sum+cost > b.limit {
		return false, b.limit - sum
	}
	b.entries = append(b.entries, enforce.LogEntry{TS: now, Cost: cost})
	return true, b.limit - sum - cost
}

func testSlidingLogMatchesBruteForce(t *testing.T, kinds []Kind) {
	for _, kind := range kinds {
		t.Run(kind.Name, func(t *testing.T) {
			for seed := uint64(1); seed <= 6; seed++ {
				rng := rand.New(rand.NewPCG(seed, 1))
				limit := enforce.Limit{Name: "log", Algorithm: enforce.SlidingWindowLog, Limit: int64(3 + rng.IntN(8)), Window: time.Second}
				t.Run(fmt.Sprintf("Seed%d_Limit%d", seed, limit.Limit), func(t *testing.T) {
					clock := NewClock()
					store := kind.New(t, clock)
					oracle := &bruteLog{limit: limit.Limit, window: limit.Window.Microseconds()}
					now := Epoch
					admitted := 0
					for i := 0; i < 300; i++ {
						// Microsecond arrivals, sometimes exactly a window apart.
						gap := time.Duration(rng.IntN(150_000)) * time.Microsecond
						if rng.IntN(10) == 0 {
							gap = 0
						}
						now = now.Add(gap)
						cost := int64(1 + rng.IntN(3))
						clock.Set(now)
						l := limit
						l.Cost = cost
						d, err := store.Allow(context.Background(), enforce.Request{Subject: "key:diff", Limits: []enforce.Limit{l}})
						if err != nil {
							t.Fatal(err)
						}
						want, remaining := oracle.allow(now.UnixMicro(), cost)
						if d.Allowed != want || d.Layers[0].Remaining != remaining {
							t.Fatalf("request %d (cost %d at +%s): store Allowed=%v Remaining=%d, brute force %v %d",
								i, cost, now.Sub(Epoch), d.Allowed, d.Layers[0].Remaining, want, remaining)
						}
						if d.Allowed {
							admitted++
						}
					}
					if admitted == 0 || admitted == 300 {
						t.Fatalf("admitted %d of 300: the sequence never exercised both outcomes", admitted)
					}
				})
			}
		})
	}
}
