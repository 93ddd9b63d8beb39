package redisstore

import (
	"context"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/enforce"
)

// BenchmarkRedisScriptBatch calls the decision script directly, from one
// caller, with batches of 32 decisions on distinct subjects, and reports
// Redis's own time in the script per decision, the median over calls from
// SLOWLOG (which the benchmark turns on for every command, so point it at a
// private redis-server): the figure the script's tricks are measured by,
// free of the client and the network. With SCRIPT_AB=<file.lua>, a former
// version of the script taking the same arguments (the script as Redis ran
// it: git show <commit>:internal/enforce/redisstore/scripts/record.lua and
// then scripts/decide.lua, concatenated; scripts/decide.lua alone for
// commits before record.lua), the two alternate call by call on the same
// state and both medians are reported. Times move with the
// machine's load; testdata/count_decide.lua counts the script's Lua
// instructions per decision on the same batches, which do not.
func BenchmarkRedisScriptBatch(b *testing.B) {
	for _, cfg := range []struct {
		name   string
		limits []enforce.Limit
	}{{"1Layer", benchLayers[:1]}, {"3Layers", benchLayers}, {"SlidingLog", []enforce.Limit{{Name: "swl", Algorithm: enforce.SlidingWindowLog, Limit: 1e9, Window: time.Minute}}}} {
		b.Run(cfg.name, func(b *testing.B) {
			const batch = 32
			client, prefix := benchRedisClient(b)
			ctx := context.Background()
			store := newTestRedisStore(b, client, Options{Prefix: prefix, Timeout: time.Second, DisableUsage: true})
			shas := []string{store.ScriptSHA()}
			if path := os.Getenv("SCRIPT_AB"); path != "" {
				old, err := os.ReadFile(path)
				if err != nil {
					b.Fatal(err)
				}
				sha, err := client.ScriptLoad(ctx, string(old)).Result()
				if err != nil {
					b.Fatal(err)
				}
				shas = append(shas, sha)
			}
			w := newBatcher(batch)
			calls := make([]*redisCall, batch)
			subject := 0
			// Every subject's state exists before the timing starts, so both
			// scripts are timed on the steady state, not on first writes.
			for i := -1000 / batch; i < b.N; i++ {
				if i == 0 {
					slowlog(b, client)
					b.ResetTimer()
				}
				for j := range calls {
					subject = (subject + 1) % 1000
					c, err := store.prepare(enforce.Request{Subject: "key:" + strconv.Itoa(subject), Limits: cfg.limits}, true, store.clock())
					if err != nil {
						b.Fatal(err)
					}
					c.count = 1
					calls[j] = c
				}
				store.sha = shas[max(0, i)%len(shas)]
				if err := store.evalSha(ctx, client, w, calls, false).Err(); err != nil {
					b.Fatal(err)
				}
				for _, c := range calls {
					store.putCall(c)
				}
				if i >= 0 && i%100 == 99 {
					collectSlowlog(b, client, shas, batch)
				}
			}
			b.StopTimer()
			per := collectSlowlog(b, client, shas, batch)
			store.sha = shas[0]
			b.ReportMetric(median(per[shas[0]]), "script-µs/decision")
			if len(shas) > 1 {
				b.ReportMetric(median(per[shas[1]]), "old-script-µs/decision")
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}

// slowlog logs every command on the server until the benchmark ends.
func slowlog(b *testing.B, c *redis.Client) {
	ctx := context.Background()
	prev, err := c.ConfigGet(ctx, "slowlog-*").Result()
	if err != nil {
		b.Fatal(err)
	}
	c.ConfigSet(ctx, "slowlog-log-slower-than", "0")
	c.ConfigSet(ctx, "slowlog-max-len", "1000")
	c.SlowLogReset(ctx)
	perDecision = map[string][]float64{}
	b.Cleanup(func() {
		for k, v := range prev {
			c.ConfigSet(ctx, k, v)
		}
	})
}

var perDecision map[string][]float64

// collectSlowlog adds the EVALSHA durations logged since the last call, per
// script SHA and decision, to perDecision, and returns it.
func collectSlowlog(b *testing.B, c *redis.Client, shas []string, batch int) map[string][]float64 {
	ctx := context.Background()
	entries, err := c.SlowLogGet(ctx, -1).Result()
	if err != nil {
		b.Fatal(err)
	}
	c.SlowLogReset(ctx)
	for _, e := range entries {
		if len(e.Args) > 1 && slices.Contains(shas, e.Args[1]) && e.Args[0] == "evalsha" || len(e.Args) > 1 && slices.Contains(shas, e.Args[1]) && e.Args[0] == "EVALSHA" {
			perDecision[e.Args[1]] = append(perDecision[e.Args[1]], float64(e.Duration.Microseconds())/float64(batch))
		}
	}
	return perDecision
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}
