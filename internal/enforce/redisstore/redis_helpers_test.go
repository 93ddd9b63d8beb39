package redisstore

import (
	"testing"

	"github.com/redis/go-redis/v9"
)

func newTestRedisStore(t testing.TB, client redis.UniversalClient, opts Options) *Store {
	t.Helper()
	s, err := New(client, opts)
	if err != nil {
		t.Fatalf("NewRedisStore: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
