package analytics_test

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/analytics"
	"github.com/sluicehq/sluice/internal/testenv"
)

// TestTopConsumersMatchAFullCount ranks consumers where the true leaders
// are never in a day's top: 300 keys over 5 days, each day 60 different
// keys spiking once, and a few steady keys just under every day's 50th,
// whose totals beat every spike. The ranking from each day's top must
// widen its look until it finds them, and agree with a count of every
// row, for both orders and with a plan.
func TestTopConsumersMatchAFullCount(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	day0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	type row struct {
		day           time.Time
		plan          string
		key           int64
		requests, rej int64
	}
	var rows []row
	for d := range 5 {
		day := day0.AddDate(0, 0, d)
		for k := int64(1); k <= 300; k++ {
			r := row{day: day, plan: []string{"free", "pro"}[k%2], key: k, requests: 1 + rng.Int64N(50)}
			switch {
			case k >= 10+60*int64(d) && k < 70+60*int64(d): // today's spikers
				r.requests = 1000 + rng.Int64N(500)
			case k <= 5: // steady: under every day's 50th, above every spiker in sum
				r.requests = 900 - k
			}
			if k%3 == 0 {
				r.rej = r.requests / 2
			}
			rows = append(rows, r)
		}
	}
	for _, r := range rows {
		if _, err := pool.Exec(ctx, `INSERT INTO consumer_days (day, plan, key_id, user_id, address, requests, rejected) VALUES ($1, $2, $3, $3, '', $4, $5)`,
			r.day, r.plan, r.key, r.requests, r.rej); err != nil {
			t.Fatal(err)
		}
	}
	q := analytics.NewReader(pool)
	from, to := day0, day0.AddDate(0, 0, 5)
	for _, order := range []analytics.ConsumerOrder{analytics.ByRequests, analytics.ByRejected} {
		for _, plan := range []string{"", "pro"} {
			t.Run(fmt.Sprintf("%s/plan=%q", order, plan), func(t *testing.T) {
				sums := map[int64]int64{}
				for _, r := range rows {
					if plan == "" || r.plan == plan {
						if order == analytics.ByRejected {
							if r.rej > 0 {
								sums[r.key] += r.rej
							}
						} else {
							sums[r.key] += r.requests
						}
					}
				}
				var want []int64
				for k := range sums {
					want = append(want, k)
				}
				slices.SortFunc(want, func(a, b int64) int { return cmp.Or(cmp.Compare(sums[b], sums[a]), cmp.Compare(a, b)) })
				want = want[:10]
				got, err := q.TopConsumers(ctx, from, to, plan, 0, order, 10)
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != 10 {
					t.Fatalf("%d consumers, want 10", len(got))
				}
				for i, c := range got {
					v := c.Requests
					if order == analytics.ByRejected {
						v = c.Rejected
					}
					if v != sums[want[i]] {
						t.Errorf("#%d: key %d with %d, want key %d with %d", i+1, c.KeyID, v, want[i], sums[want[i]])
					}
				}
			})
		}
	}
}
