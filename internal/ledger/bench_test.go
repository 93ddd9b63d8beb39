package ledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/ledger"
	"github.com/sluicehq/sluice/internal/testenv"
)

// BenchmarkLedgerOverhead is a decision on the memory store alone and
// through the ledger, for a request without a quota (the ledger's cost on
// every other request) and with one (tallied; the limit is never reached,
// so no rebuild runs after the first decision).
func BenchmarkLedgerOverhead(b *testing.B) {
	window := enforce.Request{Subject: "dev:1", Limits: []enforce.Limit{
		{Name: "w", Algorithm: enforce.FixedWindow, Limit: 1 << 40, Window: time.Hour}}}
	quota := enforce.Request{Subject: "dev:1", Limits: []enforce.Limit{
		{Name: "w", Algorithm: enforce.FixedWindow, Limit: 1 << 40, Window: time.Hour},
		{Name: "q", Algorithm: enforce.Quota, Period: enforce.PeriodMonth, Limit: 1 << 40}}}
	for _, c := range []struct {
		name string
		req  enforce.Request
	}{{"NoQuota", window}, {"Quota", quota}} {
		for _, wrapped := range []bool{false, true} {
			name := c.name + "/Bare"
			if wrapped {
				name = c.name + "/Ledger"
			}
			b.Run(name, func(b *testing.B) {
				mem := memstore.New(memstore.Options{})
				var s enforce.Store = mem
				if wrapped {
					s = ledger.New(mem, testenv.Postgres(b), ledger.Options{Shared: mem})
				}
				ctx := context.Background()
				if _, err := s.Allow(ctx, c.req); err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					if _, err := s.Allow(ctx, c.req); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
