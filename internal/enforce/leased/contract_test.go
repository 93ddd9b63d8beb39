package leased_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/leased"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/enforce/storetest"
)

// The lease store keeps the contract for exact limits, which it passes
// to the store it wraps untouched (the contract's table is exact).
func TestLeasedStoreKeepsTheStoreContract(t *testing.T) {
	storetest.Run(t, storetest.Kind{Name: "LeasedOverMemory", New: func(t *testing.T, clock *storetest.Clock) enforce.Store {
		mem := memstore.New(memstore.Options{Now: clock.Now})
		s := leased.New(mem, memTaker{mem}, leased.Options{Instances: 1, Now: clock.Now})
		t.Cleanup(func() { s.Close() })
		return s
	}})
}
