package region_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/enforce/storetest"
	"github.com/sluicehq/sluice/internal/region"
)

// The region wrapper keeps the store contract in each mode: shared passes
// decisions through, and a single region's share (share) or its own
// count plus no peers' (sync) is the whole limit, so every figure of the
// table holds.
func TestRegionStoreKeepsTheStoreContract(t *testing.T) {
	kind := func(mode region.Mode) storetest.Kind {
		return storetest.Kind{Name: "RegionOverMemory/" + string(mode), New: func(t *testing.T, clock *storetest.Clock) enforce.Store {
			cfg := region.Config{Region: "eu", Regions: []region.Weight{{Name: "eu", Weight: 1}}, Mode: mode}
			if mode == region.Shared {
				cfg = region.Config{Mode: region.Shared}
			}
			s, err := region.New(memstore.New(memstore.Options{Now: clock.Now}), cfg, nil, nil)
			if err != nil {
				t.Fatalf("region.New(%s): %v", mode, err)
			}
			return s
		}}
	}
	storetest.Run(t, kind(region.Shared), kind(region.Share), kind(region.Sync))
}
