package traffic_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/enforce/storetest"
	"github.com/sluicehq/sluice/internal/traffic"
)

// TestRecordingStoreKeepsTheStoreContract: recording traffic changes no
// decision of the store it wraps.
func TestRecordingStoreKeepsTheStoreContract(t *testing.T) {
	storetest.Run(t, storetest.Kind{Name: "RecordedMemory", New: func(t *testing.T, clock *storetest.Clock) enforce.Store {
		rec := traffic.NewRecorder(traffic.NewMemorySink(), traffic.Options{})
		return traffic.Wrap(memstore.New(memstore.Options{Now: clock.Now}), rec)
	}})
}
