package failover_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/failover"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/enforce/storetest"
)

// TestFailoverStoreKeepsTheStoreContract: over a healthy primary the
// failover store decides exactly as the primary does.
func TestFailoverStoreKeepsTheStoreContract(t *testing.T) {
	storetest.Run(t, storetest.Kind{Name: "FailoverOverMemory", New: func(t *testing.T, clock *storetest.Clock) enforce.Store {
		return failover.New(memstore.New(memstore.Options{Now: clock.Now}), failover.Options{
			Local: memstore.New(memstore.Options{Now: clock.Now}),
		})
	}})
}
