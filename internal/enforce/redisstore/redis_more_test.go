package redisstore

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/storetest"
)

func TestRedisEditedLimitLeavesNoStaleFields(t *testing.T) {
	// A tier edited in place keeps one record: the record under the new
	// figures replaces the one under the old.
	client, prefix := storetest.Redis(t)
	clock := storetest.NewClock()
	store := newTestRedisStore(t, client, Options{Prefix: prefix, Now: clock.Now, Timeout: 2 * time.Second, DisableUsage: true})
	ctx := context.Background()
	subject := "stale"
	fields := func() string {
		m, err := client.HGetAll(ctx, prefix+"{"+subject+"}").Result()
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for k := range m {
			if !strings.HasPrefix(k, "other") {
				names = append(names, k)
			}
		}
		sort.Strings(names)
		return strings.Join(names, " ")
	}
	edits := []struct {
		limit enforce.Limit
		want  string
	}{
		{enforce.Limit{Name: "t", Algorithm: enforce.SlidingWindowCounter, Limit: 10, Window: time.Minute}, "t@swc:60000000:10:0"},
		{enforce.Limit{Name: "t", Algorithm: enforce.SlidingWindowCounter, Limit: 20, Window: time.Hour}, "t@swc:3600000000:20:0"},
		{enforce.Limit{Name: "t", Algorithm: enforce.FixedWindow, Limit: 20, Window: time.Hour}, "t@fw:3600000000:20:0"},
		{enforce.Limit{Name: "t", Algorithm: enforce.TokenBucket, Limit: 20, Window: time.Hour}, "t@tb:3600000000:20:20"},
		{enforce.Limit{Name: "t", Algorithm: enforce.LeakyBucket, Limit: 20, Window: time.Hour, Burst: 3, Mode: enforce.ModeQueue}, "t@lb:3600000000:20:3"},
		{enforce.Limit{Name: "t", Algorithm: enforce.SlidingWindowCounter, Limit: 20, Window: time.Hour}, "t@swc:3600000000:20:0"},
	}
	for i, e := range edits {
		// Alone and beside another limit: the script's two paths.
		for _, limits := range [][]enforce.Limit{{e.limit}, {e.limit, {Name: "other", Algorithm: enforce.TokenBucket, Limit: 5, Window: time.Second}}} {
			d, err := store.Allow(ctx, enforce.Request{Subject: subject, Limits: limits})
			if err != nil || !d.Allowed {
				t.Fatalf("edit %d: %+v, %v", i, d, err)
			}
			got := fields()
			if got != e.want {
				t.Errorf("edit %d (%d limits): fields %q, want %q", i, len(limits), got, e.want)
			}
			clock.Set(clock.Now().Add(time.Hour))
		}
	}
}

// TestRedisKeepsAKeysStateUnderItsDevelopersTag: every Redis key a
// developer's decision touches carries the developer's hash tag, so one
// script call on one Cluster slot decides the shared and the per-key layers.
func TestRedisKeepsAKeysStateUnderItsDevelopersTag(t *testing.T) {
	client, prefix := storetest.Redis(t)
	store := newTestRedisStore(t, client, Options{Prefix: prefix, DisableUsage: true})
	limits := []enforce.Limit{
		{Name: "g", Algorithm: enforce.FixedWindow, Limit: 5, Window: time.Minute},
		{Name: "log", Algorithm: enforce.SlidingWindowLog, Limit: 5, Window: time.Minute, PerKey: true},
		{Name: "tb", Algorithm: enforce.TokenBucket, Limit: 5, Window: time.Minute, PerKey: true},
	}
	for _, key := range []string{"key:1", "key:2"} {
		if _, err := store.Allow(context.Background(), enforce.Request{Subject: "dev:3", Key: key, Limits: limits}); err != nil {
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
