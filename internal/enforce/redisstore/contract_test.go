package redisstore_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/redisstore"
	"github.com/sluicehq/sluice/internal/enforce/storetest"
)

func TestStoreContract(t *testing.T) {
	storetest.Run(t, storetest.Kind{Name: "Redis", New: func(t *testing.T, clock *storetest.Clock) enforce.Store {
		client, prefix := storetest.Redis(t)
		s, err := redisstore.New(client, redisstore.Options{Prefix: prefix, Now: clock.Now, Timeout: 2 * time.Second})
		if err != nil {
			t.Fatalf("redisstore.New: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}})
}
