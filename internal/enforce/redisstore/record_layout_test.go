package redisstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/storetest"
)

// packedRecord returns the bytes of a state record of vals as the scripts
// write it (scripts/record.lua): little-endian doubles where Redis's Lua has
// struct, and on miniredis, which has not, the numbers' %.17g texts
// separated by spaces.
func packedRecord(t *testing.T, client redis.UniversalClient, vals ...float64) string {
	t.Helper()
	has, err := client.Eval(context.Background(), "return rawget(_G, 'struct') and 1 or 0", nil).Int()
	if err != nil {
		t.Fatal(err)
	}
	if has == 0 {
		texts := make([]string, len(vals))
		for i, v := range vals {
			texts[i] = fmt.Sprintf("%.17g", v)
		}
		return strings.Join(texts, " ")
	}
	b := make([]byte, 0, 8*len(vals))
	for _, v := range vals {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
	}
	return string(b)
}

// TestRedisRecordsKeepTheirLayout pins each algorithm's record, byte for
// byte, as decide.lua writes it (a new record, then an existing one, alone
// and beside another limit: the script's paths), refund.lua rewrites it and
// adjust.lua changes a quota's: the layout Redis holds across deploys.
func TestRedisRecordsKeepTheirLayout(t *testing.T) {
	const T = 1_800_000_000_000_000.0 // the clock, µs
	day, err := enforce.ParamsOf(&enforce.Limit{Name: "q", Algorithm: enforce.Quota, Period: enforce.PeriodDay, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	qs, qe := enforce.PeriodBounds(day.Period, int64(T), 0)
	qMark := float64(qe + day.Window)
	for _, tc := range []struct {
		name   string
		limit  enforce.Limit
		field  string
		first  []float64 // after one admission
		second []float64 // after two
		refund []float64 // after the first is given back
	}{
		{
			name:  "FixedWindow",
			limit: enforce.Limit{Name: "w", Algorithm: enforce.FixedWindow, Limit: 10, Window: time.Minute},
			field: "w@fw:60000000:10:0",
			// window index, count, TTL mark (the window's end and a window)
			first: []float64{3e7, 1, T + 12e7}, second: []float64{3e7, 2, T + 12e7}, refund: []float64{3e7, 1, T + 12e7},
		},
		{
			name:  "SlidingWindowCounter",
			limit: enforce.Limit{Name: "w", Algorithm: enforce.SlidingWindowCounter, Limit: 10, Window: time.Minute},
			field: "w@swc:60000000:10:0",
			// window index, current and previous counts, TTL mark
			first: []float64{3e7, 1, 0, T + 18e7}, second: []float64{3e7, 2, 0, T + 18e7}, refund: []float64{3e7, 1, 0, T + 18e7},
		},
		{
			name:  "TokenBucket",
			limit: enforce.Limit{Name: "b", Algorithm: enforce.TokenBucket, Limit: 10, Window: time.Minute},
			field: "b@tb:60000000:10:10",
			// tat (6 s a unit), TTL mark
			first: []float64{T + 6e6, T + 66e6}, second: []float64{T + 12e6, T + 66e6}, refund: []float64{T + 6e6, T + 66e6},
		},
		{
			name:  "LeakyBucket",
			limit: enforce.Limit{Name: "b", Algorithm: enforce.LeakyBucket, Limit: 10, Window: time.Minute, Burst: 3},
			field: "b@lb:60000000:10:3",
			first: []float64{T + 6e6, T + 66e6}, second: []float64{T + 12e6, T + 66e6}, refund: []float64{T + 6e6, T + 66e6},
		},
		{
			name:  "Quota",
			limit: enforce.Limit{Name: "q", Algorithm: enforce.Quota, Period: enforce.PeriodDay, Limit: 10},
			field: "q@qd:" + fmt.Sprint(day.Window) + ":10:0",
			// period start, count, TTL mark (the period's end and its span)
			first: []float64{float64(qs), 1, qMark}, second: []float64{float64(qs), 2, qMark}, refund: []float64{float64(qs), 1, qMark},
		},
	} {
		// Alone and beside another limit, whose record is written with
		// this one in the same HSET.
		other := enforce.Limit{Name: "other", Algorithm: enforce.TokenBucket, Limit: 5, Window: time.Second}
		for _, limits := range [][]enforce.Limit{{tc.limit}, {tc.limit, other}} {
			t.Run(fmt.Sprintf("%s/%dLimits", tc.name, len(limits)), func(t *testing.T) {
				client, prefix := storetest.Redis(t)
				clock := storetest.NewClockAt(time.UnixMicro(int64(T)))
				store := newTestRedisStore(t, client, Options{Prefix: prefix, Now: clock.Now, DisableUsage: true})
				ctx := context.Background()
				req := enforce.Request{Subject: "layout", Limits: limits}
				check := func(step string, want []float64) {
					t.Helper()
					got, err := client.HGet(ctx, prefix+"{layout}", tc.field).Result()
					if err != nil {
						t.Fatalf("%s: %v", step, err)
					}
					if w := packedRecord(t, client, want...); got != w {
						t.Errorf("%s: record %q, want %q (%v)", step, got, w, want)
					}
				}
				for i, want := range [][]float64{tc.first, tc.second} {
					if d, err := store.Allow(ctx, req); err != nil || !d.Allowed {
						t.Fatalf("admission %d: %+v, %v", i+1, d, err)
					}
					check(fmt.Sprintf("after %d admissions", i+1), want)
				}
				if err := store.Refund(ctx, enforce.Request{Subject: "layout", Limits: []enforce.Limit{tc.limit}}, clock.Now()); err != nil {
					t.Fatal(err)
				}
				check("after a refund", tc.refund)
				if tc.limit.Algorithm == enforce.Quota {
					if _, err := store.GrantQuota(ctx, enforce.Request{Subject: "layout", Limits: []enforce.Limit{tc.limit}}, 3); err != nil {
						t.Fatal(err)
					}
					check("after a grant of 3", []float64{float64(qs), -2, qMark})
				}
			})
		}
	}
}
