package memstore_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/enforce/storetest"
)

func TestStoreContract(t *testing.T) {
	storetest.Run(t, storetest.Kind{Name: "Memory", New: func(t *testing.T, clock *storetest.Clock) enforce.Store {
		return memstore.New(memstore.Options{Now: clock.Now})
	}})
}
