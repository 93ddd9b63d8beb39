package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/enforce/storetest"
)

// TestRedisStateOfFormerLayoutGoesOn runs a subject's requests on main's
// script of before records (testdata/decide_main.lua: fields F, F:+, F:-,
// F:# and 'e'), then on the current one, beside a memory store given the
// same requests: every decision after the switch must be the memory
// store's, so no count is lost in a deploy, whether the limit stays or is
// edited at the switch (its state rescaled from the former layout). Once a
// limit is written again, none of the former layout's fields is left.
func TestRedisStateOfFormerLayoutGoesOn(t *testing.T) {
	const s = time.Second
	cases := []struct {
		name         string
		before, then []enforce.Limit
	}{
		{"TokenBucket", []enforce.Limit{{Name: "tb", Algorithm: enforce.TokenBucket, Limit: 8, Window: 4 * s, Burst: 4}}, nil},
		{"LeakyBucket", []enforce.Limit{{Name: "lb", Algorithm: enforce.LeakyBucket, Limit: 8, Window: 4 * s, Burst: 3}}, nil},
		{"FixedWindow", []enforce.Limit{{Name: "fw", Algorithm: enforce.FixedWindow, Limit: 6, Window: 5 * s}}, nil},
		{"SlidingCounter", []enforce.Limit{{Name: "swc", Algorithm: enforce.SlidingWindowCounter, Limit: 6, Window: 5 * s}}, nil},
		{"Quota", []enforce.Limit{{Name: "q", Algorithm: enforce.Quota, Period: enforce.PeriodDay, Limit: 40}}, nil},
		{"ThreeLayers", []enforce.Limit{
			{Name: "tb", Algorithm: enforce.TokenBucket, Limit: 10, Window: 4 * s, Burst: 5},
			{Name: "fw", Algorithm: enforce.FixedWindow, Limit: 9, Window: 5 * s},
			{Name: "swc", Algorithm: enforce.SlidingWindowCounter, Limit: 8, Window: 6 * s}}, nil},
		{"EditedAtTheSwitch", []enforce.Limit{
			{Name: "tb", Algorithm: enforce.TokenBucket, Limit: 8, Window: 4 * s, Burst: 4},
			{Name: "fw", Algorithm: enforce.FixedWindow, Limit: 6, Window: 5 * s}}, []enforce.Limit{
			{Name: "tb", Algorithm: enforce.TokenBucket, Limit: 16, Window: 4 * s, Burst: 6},
			{Name: "fw", Algorithm: enforce.FixedWindow, Limit: 4, Window: 5 * s}}},
		{"EditedAloneAtTheSwitch", []enforce.Limit{{Name: "swc", Algorithm: enforce.SlidingWindowCounter, Limit: 6, Window: 5 * s}},
			[]enforce.Limit{{Name: "swc", Algorithm: enforce.SlidingWindowCounter, Limit: 9, Window: 5 * s}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			client, prefix, red, clock, upgrade := onFormerScript(t)
			mem := memstore.New(memstore.Options{Now: clock.Now})
			rng := rand.New(rand.NewPCG(7, 0))
			limits := tc.before
			rejected := [2]int{}
			for i := range 120 {
				if i == 60 {
					upgrade()
					if tc.then != nil {
						limits = tc.then
					}
				}
				clock.Set(clock.Now().Add(time.Duration(rng.IntN(400)) * time.Millisecond))
				req := enforce.Request{Subject: "migrating", Limits: limits}
				want, err := mem.Allow(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				got, err := red.Allow(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				if g, w := decisionText(got), decisionText(want); g != w {
					t.Fatalf("request %d: Redis %s, memory %s", i, g, w)
				}
				if !got.Allowed {
					rejected[i/60]++
				}
			}
			if rejected[0] == 0 || rejected[1] == 0 {
				t.Fatalf("rejections before and after the switch %v: the requests never reached the limits", rejected)
			}
			fields, err := client.HKeys(ctx, prefix+"{migrating}").Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range fields {
				if !strings.Contains(f, "@") && !strings.HasSuffix(f, ":#") {
					t.Errorf("field %q of the former layout left in %v", f, fields)
				}
			}
		})
	}
}

// TestRedisQuotaAdjustOnFormerLayout grants units of a quota whose count
// main's script wrote (the layout before records), as the memory store
// does: the count stands and the grant comes off it.
func TestRedisQuotaAdjustOnFormerLayout(t *testing.T) {
	ctx := context.Background()
	_, _, red, clock, upgrade := onFormerScript(t)
	mem := memstore.New(memstore.Options{Now: clock.Now})
	req := enforce.Request{Subject: "granted", Limits: []enforce.Limit{{Name: "q", Algorithm: enforce.Quota, Period: enforce.PeriodDay, Limit: 5}}}
	for range 4 {
		for _, st := range []enforce.Store{mem, red} {
			if _, err := st.Allow(ctx, req); err != nil {
				t.Fatal(err)
			}
		}
	}
	upgrade()
	want, err := mem.GrantQuota(ctx, req, 3)
	if err != nil {
		t.Fatal(err)
	}
	got, err := red.GrantQuota(ctx, req, 3)
	if err != nil {
		t.Fatal(err)
	}
	if got.Remaining != 4 || got != want {
		t.Fatalf("after the grant: Redis %+v, memory %+v (want 4 remaining)", got, want)
	}
	for i := range 5 {
		w, _ := mem.Allow(ctx, req)
		g, err := red.Allow(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if decisionText(g) != decisionText(w) {
			t.Fatalf("request %d after the grant: Redis %s, memory %s", i, decisionText(g), decisionText(w))
		}
	}
}

// onFormerScript returns a Redis store over a fake clock that decides with
// main's script of before records (testdata/decide_main.lua), and a
// function that switches it to the current script, as a deploy does.
func onFormerScript(t *testing.T) (client redis.UniversalClient, prefix string, store *Store, clock *storetest.Clock, upgrade func()) {
	t.Helper()
	old, err := os.ReadFile("testdata/decide_main.lua")
	if err != nil {
		t.Fatal(err)
	}
	clock = storetest.NewClock()
	client, prefix = storetest.Redis(t)
	store = newTestRedisStore(t, client, Options{Prefix: prefix, Now: clock.Now, Timeout: 2 * time.Second, DisableUsage: true})
	current := store.sha
	if store.sha, err = client.ScriptLoad(context.Background(), string(old)).Result(); err != nil {
		t.Fatal(err)
	}
	return client, prefix, store, clock, func() { store.sha = current }
}

// decisionText is what a caller sees of d: allowed, delay, and each
// layer's outcome, remaining, reset and retry.
func decisionText(d enforce.Decision) string {
	var b strings.Builder
	fmt.Fprintf(&b, "allowed=%v delay=%s", d.Allowed, d.Delay)
	for _, l := range d.Layers {
		fmt.Fprintf(&b, " [%s %v %d %s %s]", l.Limit.Name, l.Allowed, l.Remaining, l.ResetAfter, l.RetryAfter)
	}
	return b.String()
}

// TestRedisTTLsCoverTheState checks, after each of a subject's requests,
// that its keys live at least a window longer than the request (every
// state written expires at or after the request, and the script gives a
// key a window beyond its latest state's expiry): the TTL moves only when a
// record's mark, or the log's, no longer covers its state, with PEXPIRE GT
// on a hash that may be new, or written by the former layout.
func TestRedisTTLsCoverTheState(t *testing.T) {
	const s = time.Second
	limits := []enforce.Limit{
		{Name: "tb", Algorithm: enforce.TokenBucket, Limit: 1000, Window: 2 * s},
		{Name: "fw", Algorithm: enforce.FixedWindow, Limit: 1000, Window: 30 * s},
		{Name: "swc", Algorithm: enforce.SlidingWindowCounter, Limit: 1000, Window: 20 * s},
		{Name: "log", Algorithm: enforce.SlidingWindowLog, Limit: 1000, Window: 10 * s},
	}
	for _, switchAt := range []int{0, 20} {
		t.Run(fmt.Sprintf("FormerScriptFor%d", switchAt), func(t *testing.T) {
			ttlsCoverTheState(t, limits, switchAt)
		})
	}
}

func ttlsCoverTheState(t *testing.T, limits []enforce.Limit, switchAt int) {
	const s = time.Second
	ctx := context.Background()
	client, prefix, store, clock, upgrade := onFormerScript(t)
	rng := rand.New(rand.NewPCG(3, 0))
	for i := range 200 {
		if i == switchAt {
			upgrade()
		}
		clock.Set(clock.Now().Add(time.Duration(rng.IntN(3000)) * time.Millisecond))
		// one limit, then all of them: the script's two paths
		req := enforce.Request{Subject: "ttl", Limits: limits[:1]}
		want := map[string]time.Duration{prefix + "{ttl}": 2 * s}
		if i%2 == 1 {
			req.Limits = limits
			want = map[string]time.Duration{prefix + "{ttl}": 30 * s, prefix + "{ttl}:log:log": 10 * s}
		}
		if d, err := store.Allow(ctx, req); err != nil || !d.Allowed {
			t.Fatalf("request %d: %+v, %v", i, d, err)
		}
		for key, window := range want {
			ttl, err := client.PTTL(ctx, key).Result()
			if err != nil {
				t.Fatal(err)
			}
			// (half a window of slack for the real time the test takes on a
			// loaded machine: a missing TTL or one short by a window fails)
			if ttl < window/2 {
				t.Fatalf("request %d: PTTL(%s) = %s, want at least %s", i, key, ttl, window)
			}
		}
	}
}
