package enforce

import (
	"context"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestKeysOfOneDeveloperShareThePlanWideLimit: two keys of one subject
// share the limits that are not PerKey and keep their own PerKey ones, in
// both stores; a rejection by the shared layer consumes nothing from the
// key's own layer, and concurrent decisions of both keys admit exactly the
// shared limit.
func TestKeysOfOneDeveloperShareThePlanWideLimit(t *testing.T) {
	shared := Limit{Name: "pro-global", Algorithm: FixedWindow, Limit: 10, Window: time.Hour}
	tier := Limit{Name: "pro-search", Algorithm: FixedWindow, Limit: 6, Window: time.Hour, Route: "GET /api/search", PerKey: true}
	limits := []Limit{shared, tier}
	for _, kind := range storeKinds() {
		t.Run(kind.name, func(t *testing.T) {
			t.Run("SharedLayerAcrossKeys", func(t *testing.T) {
				store := kind.new(t, newFakeClock())
				ctx := context.Background()
				admitted := map[string]int{}
				for i := range 20 {
					key := []string{"key:1", "key:2"}[i%2]
					d, err := store.Allow(ctx, Request{Subject: "dev:7", Key: key, Route: tier.Route, Limits: limits})
					if err != nil {
						t.Fatal(err)
					}
					if d.Allowed {
						admitted[key]++
					}
				}
				if admitted["key:1"] != 5 || admitted["key:2"] != 5 {
					t.Fatalf("admitted per key = %v, want 5 and 5: the plan-wide 10 is shared", admitted)
				}
				// Each key spent 5 of its own 6: the shared rejections took
				// nothing from the keys' tiers.
				for _, key := range []string{"key:1", "key:2"} {
					d, err := store.Peek(ctx, Request{Subject: "dev:7", Key: key, Route: tier.Route, Limits: limits})
					if err != nil {
						t.Fatal(err)
					}
					if d.Layers[0].Remaining != 0 || d.Layers[1].Remaining != 1 {
						t.Fatalf("%s remaining = %d shared, %d own; want 0 and 1", key, d.Layers[0].Remaining, d.Layers[1].Remaining)
					}
				}
			})
			t.Run("PerKeyLayerIsTheKeysOwn", func(t *testing.T) {
				store := kind.new(t, newFakeClock())
				ctx := context.Background()
				only := []Limit{tier}
				count := func(key string) int {
					n := 0
					for range 10 {
						d, err := store.Allow(ctx, Request{Subject: "dev:7", Key: key, Route: tier.Route, Limits: only})
						if err != nil {
							t.Fatal(err)
						}
						if d.Allowed {
							n++
						}
					}
					return n
				}
				if a, b := count("key:1"), count("key:2"); a != 6 || b != 6 {
					t.Fatalf("admitted = %d and %d, want 6 each: an endpoint tier counts per key", a, b)
				}
			})
			t.Run("ConcurrentKeysAdmitExactlyTheSharedLimit", func(t *testing.T) {
				store := kind.new(t, newFakeClock())
				big := []Limit{{Name: "pro-global", Algorithm: FixedWindow, Limit: 50, Window: time.Hour},
					{Name: "pro-search", Algorithm: TokenBucket, Limit: 1000, Window: time.Hour, PerKey: true}}
				var mu sync.Mutex
				var wg sync.WaitGroup
				admitted := 0
				for g := range 8 {
					wg.Go(func() {
						key := "key:" + string(rune('a'+g%4))
						for range 25 {
							d, err := store.Allow(context.Background(), Request{Subject: "dev:9", Key: key, Limits: big})
							if err != nil {
								t.Error(err)
								return
							}
							if d.Allowed {
								mu.Lock()
								admitted++
								mu.Unlock()
							}
						}
					})
				}
				wg.Wait()
				if admitted != 50 {
					t.Fatalf("admitted %d of 200 over 4 keys, want exactly the shared 50", admitted)
				}
			})
		})
	}
}

// TestRedisKeepsAKeysStateUnderItsDevelopersTag: every Redis key a
// developer's decision touches carries the developer's hash tag, so one
// script call on one Cluster slot decides the shared and the per-key layers.
func TestRedisKeepsAKeysStateUnderItsDevelopersTag(t *testing.T) {
	client, prefix := newTestRedis(t)
	store := newTestRedisStore(t, client, RedisOptions{Prefix: prefix, DisableUsage: true})
	limits := []Limit{
		{Name: "g", Algorithm: FixedWindow, Limit: 5, Window: time.Minute},
		{Name: "log", Algorithm: SlidingWindowLog, Limit: 5, Window: time.Minute, PerKey: true},
		{Name: "tb", Algorithm: TokenBucket, Limit: 5, Window: time.Minute, PerKey: true},
	}
	for _, key := range []string{"key:1", "key:2"} {
		if _, err := store.Allow(context.Background(), Request{Subject: "dev:3", Key: key, Limits: limits}); err != nil {
			t.Fatal(err)
		}
	}
	keys, err := client.Keys(context.Background(), prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 3 { // the hash, and a log per key
		t.Fatalf("keys = %v, want the subject's hash and two sliding logs", keys)
	}
	for _, k := range keys {
		if !strings.HasPrefix(k, prefix+"{dev:3}") {
			t.Errorf("key %q is outside the developer's hash tag", k)
		}
	}
	fields, err := client.HKeys(context.Background(), prefix+"{dev:3}").Result()
	if err != nil {
		t.Fatal(err)
	}
	var perKey int
	for _, f := range fields {
		if strings.HasPrefix(f, "key:1|tb@") || strings.HasPrefix(f, "key:2|tb@") {
			perKey++
		}
	}
	if perKey != 2 {
		t.Fatalf("hash fields = %v, want one token bucket per key", fields)
	}
}

func TestStoresRefuseABracedKey(t *testing.T) {
	l := []Limit{{Name: "g", Algorithm: FixedWindow, Limit: 5, Window: time.Minute, PerKey: true}}
	for _, kind := range storeKinds() {
		t.Run(kind.name, func(t *testing.T) {
			_, err := kind.new(t, newFakeClock()).Allow(context.Background(), Request{Subject: "dev:1", Key: "key:{1}", Limits: l})
			if err == nil || !strings.Contains(err.Error(), "brace") {
				t.Fatalf("Allow = %v, want an invalid-request error naming the brace", err)
			}
		})
	}
}

func TestAddressPrefixes(t *testing.T) {
	tests := []struct {
		name     string
		prefixes AddressPrefixes
		addr     string
		want     string
	}{
		{"IPv4Whole", AddressPrefixes{}, "192.0.2.7", "ip:192.0.2.7"},
		{"IPv4MappedIsIPv4", AddressPrefixes{}, "::ffff:192.0.2.7", "ip:192.0.2.7"},
		{"IPv6Default64", AddressPrefixes{}, "2001:db8:1:2:aaaa::1", "ip:2001:db8:1:2::/64"},
		{"IPv6SameBlock", AddressPrefixes{}, "2001:db8:1:2:ffff:ffff:ffff:ffff", "ip:2001:db8:1:2::/64"},
		{"IPv6Zone", AddressPrefixes{}, "fe80::1%eth0", "ip:fe80::/64"},
		{"IPv4Block24", AddressPrefixes{IPv4: 24}, "192.0.2.7", "ip:192.0.2.0/24"},
		{"IPv6Block48", AddressPrefixes{IPv6: 48}, "2001:db8:1:2::1", "ip:2001:db8:1::/48"},
		{"IPv6Whole", AddressPrefixes{IPv6: 128}, "2001:db8::1", "ip:2001:db8::1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.prefixes.Subject(netip.MustParseAddr(tt.addr)); got != tt.want {
				t.Fatalf("Subject(%s) = %q, want %q", tt.addr, got, tt.want)
			}
		})
	}
	t.Run("InvalidAddress", func(t *testing.T) {
		if got := (AddressPrefixes{}).Subject(netip.Addr{}); got != "ip:unknown" {
			t.Fatalf("Subject(invalid) = %q", got)
		}
	})
	t.Run("Validate", func(t *testing.T) {
		for _, p := range []AddressPrefixes{{IPv4: 33}, {IPv4: -1}, {IPv6: 129}} {
			if err := p.Validate(); err == nil {
				t.Errorf("Validate(%+v) = nil, want an error", p)
			}
		}
		if err := (AddressPrefixes{IPv4: 24, IPv6: 56}).Validate(); err != nil {
			t.Errorf("Validate(24, 56) = %v", err)
		}
	})
}
