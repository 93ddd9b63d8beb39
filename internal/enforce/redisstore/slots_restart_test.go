package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/storetest"
)

// TestRenewalPutsBackSlotsRedisLost: three requests in flight on a cap of
// three, Redis loses every key (restarted empty): until the running
// requests renew, Redis does not know of them; each renewal puts its
// lease back, and then a fourth request is refused again.
func TestRenewalPutsBackSlotsRedisLost(t *testing.T) {
	client, prefix := storetest.Redis(t)
	s := newTestRedisStore(t, client, Options{Prefix: prefix})
	ctx := context.Background()
	req := enforce.Request{Subject: "dev:1", Limits: []enforce.Limit{{Name: "cc", Algorithm: enforce.Concurrency, Limit: 3}}}
	var leases []*enforce.Lease
	for range 3 {
		l, d, err := s.AcquireSlots(ctx, req, time.Minute)
		if err != nil || !d.Allowed {
			t.Fatalf("acquire: %v %+v", err, d)
		}
		leases = append(leases, l)
	}
	keys, err := client.Keys(ctx, prefix+"*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("keys under %s: %v %v", prefix, keys, err)
	}
	if err := client.Del(ctx, keys...).Err(); err != nil {
		t.Fatal(err)
	}
	d, err := s.Peek(ctx, req)
	if err != nil || !d.Allowed {
		t.Fatalf("after the loss, before renewals: Peek = %+v %v; want room (Redis forgot the three)", d, err)
	}
	for _, l := range leases {
		if err := l.Renew(ctx); err != nil {
			t.Fatal(err)
		}
	}
	l, d, err := s.AcquireSlots(ctx, req, time.Minute)
	if err != nil || d.Allowed || l != nil {
		t.Fatalf("after the renewals: AcquireSlots = %+v, %v; want refused, three in flight", d, err)
	}
	if got := d.Layers[0].Remaining; got != 0 {
		t.Fatalf("remaining %d after the renewals, want 0", got)
	}
	// And their slots are freed as before.
	leases[0].Release(ctx)
	if _, d, _ := s.AcquireSlots(ctx, req, time.Minute); !d.Allowed {
		t.Fatal("a released slot was not free")
	}
}
