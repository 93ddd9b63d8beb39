package alerts_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/users"
)

// BenchmarkEvaluateRound is one evaluator round over 20 developers with a
// rule and a key each, nothing crossing (the steady state), beside the
// Peeks alone that the round makes: the difference is the round's reads of
// Postgres (rules, keys, limits, anchors). Reported per developer.
func BenchmarkEvaluateRound(b *testing.B) {
	const developers = 20
	pool := testenv.Postgres(b)
	f := newPlanFixture(b, pool, dailyWindow)
	ctx := context.Background()
	var reqs []enforce.Request
	for i := range developers {
		u, err := users.NewRepo(pool).Create(ctx, users.NewUser{Email: fmt.Sprintf("d%d@example.com", i), Password: "correct horse battery", Role: users.RoleDeveloper, PlanID: f.planID})
		if err != nil {
			b.Fatal(err)
		}
		k, _, err := f.keys.Create(ctx, "test", apikeys.NewKey{UserID: u.ID, Name: "k"})
		if err != nil {
			b.Fatal(err)
		}
		if err := f.svc.EnsureDefaultRule(ctx, u.ID); err != nil {
			b.Fatal(err)
		}
		reqs = append(reqs, enforce.Request{Subject: enforce.DeveloperSubject(u.ID), Key: enforce.KeyScope(k.ID), Limits: f.limits, Anchor: u.CreatedAt})
	}
	frozen := time.Now()
	store := memstore.New(memstore.Options{Now: func() time.Time { return frozen }})
	ev := f.evaluator(pool, store, false)
	b.Run("round", func(b *testing.B) {
		for b.Loop() {
			if n, err := ev.Evaluate(ctx); err != nil || n != 0 {
				b.Fatal(n, err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/developers, "ns/developer")
	})
	b.Run("peeks", func(b *testing.B) {
		for b.Loop() {
			for _, r := range reqs {
				if _, err := store.Peek(ctx, r); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/developers, "ns/developer")
	})
}
