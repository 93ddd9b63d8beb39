package redisstore

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/storetest"
)

// TestRedisUsageSeriesStayBounded: 100,000 distinct anonymous callers leave
// at most UsageTopSubjects series and one UsageOthers row of usage in a
// bucket, every other key they leave expires with their windows, and no
// request goes uncounted.
func TestRedisUsageSeriesStayBounded(t *testing.T) {
	client, prefix := storetest.Redis(t)
	clock := storetest.NewClock()
	store := newTestRedisStore(t, client, Options{Prefix: prefix, Now: clock.Now, UsageTopSubjects: 10, Timeout: 10 * time.Second})
	limits := []enforce.Limit{{Name: "anonymous-global", Algorithm: enforce.FixedWindow, Limit: 60, Window: time.Minute}}
	ctx := context.Background()
	const n = 100_000
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			for i := g; i < n; i += 32 {
				if _, err := store.Allow(ctx, enforce.Request{Subject: floodSubject(i), Route: "GET /api/search", Limits: limits}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	// A developer's key keeps its own series whatever the flood.
	for range 3 {
		if _, err := store.Allow(ctx, enforce.Request{Subject: "dev:1", Key: "key:1", Route: "GET /api/search", Limits: limits}); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	points, err := store.Usage(ctx, []string{UsageOthers, "dev:1"}, clock.Now().Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	var usage, lasting, short int
	var batch []string
	classify := func() {
		pipe := client.Pipeline()
		ttls := make([]*redis.DurationCmd, len(batch))
		for i, k := range batch {
			ttls[i] = pipe.TTL(ctx, k)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		for i, k := range batch {
			switch {
			case strings.Contains(k, ":stats:"):
				usage++
			case ttls[i].Val() > 2*time.Minute+time.Second:
				lasting++
			default:
				short++
			}
		}
		batch = batch[:0]
	}
	iter := client.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		if batch = append(batch, iter.Val()); len(batch) == 1000 {
			classify()
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	classify()
	if usage > 10+2 {
		t.Fatalf("%d usage keys after %d callers, want at most 10 series, the others row and the developer's", usage, n)
	}
	if lasting != 0 {
		t.Fatalf("%d keys outlive their windows", lasting)
	}
	var others, dev int64
	for _, p := range points {
		switch p.Subject {
		case UsageOthers:
			others += p.Admitted
		case "dev:1":
			dev += p.Admitted
		}
	}
	if others != n-10 || dev != 3 {
		t.Fatalf("others admitted %d, developer %d; want %d and 3: folded requests are still counted", others, dev, n-10)
	}
	t.Logf("%d callers: %d usage keys, %d state keys expiring with their windows", n, usage, short)
}

func TestFoldOthers(t *testing.T) {
	const bucket = 1_800_000_000
	counts := map[usageTallyKey]usageCounts{}
	add := func(subject, route string, admitted int64, keyed bool) {
		counts[usageTallyKey{subject, route, bucket}] = usageCounts{admitted: admitted, keyed: keyed}
	}
	add("ip:a", "r1", 5, false)
	add("ip:b", "r1", 9, false)
	add("ip:b", "r2", 1, false)
	add("ip:c", "r1", 2, false)
	add("ip:d", "r2", 3, false)
	add("dev:1", "r1", 1, true)
	written := foldOthers(counts, nil, 2, bucket)
	got := map[string]int64{}
	for k, c := range counts {
		got[k.subject+" "+k.route] = c.admitted
	}
	want := map[string]int64{
		"ip:b r1": 9, "ip:b r2": 1, // the two biggest keep their series
		"ip:a r1":           5,
		"dev:1 r1":          1, // keyed: never folded
		UsageOthers + " r1": 2, UsageOthers + " r2": 3,
	}
	if len(got) != len(want) {
		t.Fatalf("after folding: %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("after folding: %v, want %v", got, want)
		}
	}
	t.Run("ASubjectWithASeriesKeepsIt", func(t *testing.T) {
		// The next flush of the same bucket: ip:a keeps its series though
		// newcomers are bigger, and the full bucket folds every newcomer.
		next := map[usageTallyKey]usageCounts{
			{"ip:a", "r1", bucket}: {admitted: 1},
			{"ip:e", "r1", bucket}: {admitted: 50},
		}
		foldOthers(next, written, 2, bucket)
		if next[usageTallyKey{"ip:a", "r1", bucket}].admitted != 1 || next[usageTallyKey{UsageOthers, "r1", bucket}].admitted != 50 {
			t.Fatalf("second flush: %v", next)
		}
	})
	t.Run("OldBucketsAreForgotten", func(t *testing.T) {
		later := int64(bucket + enforce.UsageRetention/time.Second + 10)
		w := foldOthers(map[usageTallyKey]usageCounts{}, written, 2, later)
		if _, ok := w[bucket]; ok {
			t.Fatal("a bucket out of retention is still tracked")
		}
	})
}
