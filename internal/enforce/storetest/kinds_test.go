package storetest

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/enforce/redisstore"
)

// storeKinds are the two stores of the module, for the tests here that
// compare them side by side.
func storeKinds() []Kind {
	return []Kind{
		{"Memory", func(t *testing.T, clock *Clock) enforce.Store {
			return memstore.New(memstore.Options{Now: clock.Now})
		}},
		{"Redis", func(t *testing.T, clock *Clock) enforce.Store {
			client, prefix := Redis(t)
			return newRedisStore(t, client, redisstore.Options{Prefix: prefix, Now: clock.Now, Timeout: 2 * time.Second})
		}},
	}
}

// newRedisStore returns a Redis store closed when t ends.
func newRedisStore(t testing.TB, client redis.UniversalClient, opts redisstore.Options) *redisstore.Store {
	t.Helper()
	s, err := redisstore.New(client, opts)
	if err != nil {
		t.Fatalf("redisstore.New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
