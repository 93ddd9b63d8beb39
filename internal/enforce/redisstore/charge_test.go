package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/redisstore"
	"github.com/sluicehq/sluice/internal/testenv"
)

// TestRedisChargeCountsPastTheLimit charges more than a limit holds and
// checks every algorithm then rejects, and that a window's count or a
// bucket's debt carries the whole charge (not only what remained).
func TestRedisChargeCountsPastTheLimit(t *testing.T) {
	client, prefix := testenv.Redis(t)
	now := time.UnixMicro(1_700_000_000_000_000)
	store, err := redisstore.New(client, redisstore.Options{Prefix: prefix, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	ctx := context.Background()
	for _, alg := range enforce.RateAlgorithms {
		t.Run(string(alg), func(t *testing.T) {
			l := enforce.Limit{Name: "l", Algorithm: alg, Limit: 10, Window: time.Second}
			if alg == enforce.LeakyBucket {
				l.Burst = 10 // a queue of 10, or the frozen clock admits one
			}
			subject := "key:" + string(alg)
			// 4 admitted here, then 16 charged from elsewhere: 20 in all.
			for range 4 {
				d, err := store.Allow(ctx, enforce.Request{Subject: subject, Limits: []enforce.Limit{l}})
				if err != nil || !d.Allowed {
					t.Fatalf("allow before the charge: %v %+v", err, d)
				}
			}
			charged := l
			charged.Cost = 16
			if err := store.Charge(ctx, enforce.Request{Subject: subject, Limits: []enforce.Limit{charged}}); err != nil {
				t.Fatalf("charge: %v", err)
			}
			d, err := store.Peek(ctx, enforce.Request{Subject: subject, Limits: []enforce.Limit{l}})
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed || d.Layers[0].Remaining != 0 {
				t.Fatalf("after charging past the limit: allowed %v remaining %d, want rejected with 0", d.Allowed, d.Layers[0].Remaining)
			}
			switch alg {
			case enforce.TokenBucket, enforce.LeakyBucket:
				// 20 units at 10/s into a capacity of 10: in debt until
				// a second of refill has paid the 10 past the capacity.
				if d.Layers[0].RetryAfter < time.Second {
					t.Fatalf("retry after %s, want at least 1s: the debt was not kept", d.Layers[0].RetryAfter)
				}
			default:
				if d.Layers[0].RetryAfter <= 0 {
					t.Fatalf("retry after %s, want positive", d.Layers[0].RetryAfter)
				}
			}
		})
	}
	t.Run("ErrInvalidRequest", func(t *testing.T) {
		err := store.Charge(ctx, enforce.Request{Subject: "key:x"})
		if err == nil {
			t.Fatal("a charge without limits was accepted")
		}
	})
}
