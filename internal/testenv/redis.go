package testenv

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// localRedisAddr is where a machine's own Redis usually listens.
const localRedisAddr = "127.0.0.1:6379"

// redisServer is the Redis server the tests of this binary share; process-wide
// for the same reason as pgServer.
type redisServer struct {
	url string
	// mini is set for the in-process miniredis fallback, which lacks some
	// commands (BITFIELD among them).
	mini bool
}

var (
	redisOnce sync.Once
	redisInst *redisServer
	redisErr  error
)

// Redis returns a client and a unique key prefix such as "test:3f9a0c1e2b4d:".
// The test must put every key it writes under the prefix; those keys are
// deleted (SCAN and DEL, never FLUSH) and the client closed when the test ends.
func Redis(t testing.TB) (redis.UniversalClient, string) {
	t.Helper()
	u := RedisURL(t)
	opts, err := redis.ParseURL(u)
	if err != nil {
		t.Fatalf("testenv: redis URL: %v", err)
	}
	client := redis.NewClient(opts)
	prefix := "test:" + randomSuffix(t, 6) + ":"
	t.Cleanup(func() {
		defer client.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := deletePrefix(ctx, client, prefix); err != nil {
			t.Errorf("testenv: delete keys %s*: %v", prefix, err)
		}
	})
	return client, prefix
}

// RedisURL returns the URL of the Redis server tests use, for code that makes
// its own client (a portal process under test). Keys written through it must
// still carry a prefix from Redis to be cleaned up.
func RedisURL(t testing.TB) string {
	t.Helper()
	redisOnce.Do(func() { redisInst, redisErr = findRedis(localRedisAddr) })
	if redisErr != nil {
		t.Fatalf("testenv: redis: %v", redisErr)
	}
	return redisInst.url
}

// findRedis picks the server per the package documentation; local is the
// address of the machine's own server.
func findRedis(local string) (*redisServer, error) {
	u := firstEnv("TEST_REDIS_URL", "REDIS_URL")
	if u == "miniredis" {
		return startMiniredis()
	}
	if u != "" {
		return &redisServer{url: u}, nil
	}
	if reachable(local) {
		localURL := "redis://" + local + "/0"
		c := redis.NewClient(&redis.Options{Addr: local})
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		_ = c.Close()
		if err == nil {
			return &redisServer{url: localURL}, nil
		}
		if requireServices() {
			return nil, fmt.Errorf("%s does not answer PING: %w", local, err)
		}
	}
	if requireServices() {
		return nil, fmt.Errorf("TEST_REQUIRE_SERVICES=1 but TEST_REDIS_URL and REDIS_URL are unset and nothing answers on %s", local)
	}
	return startMiniredis()
}

// startMiniredis starts an in-process Redis that lives as long as the test
// binary.
func startMiniredis() (*redisServer, error) {
	m, err := miniredis.Run()
	if err != nil {
		return nil, fmt.Errorf("start miniredis: %w", err)
	}
	return &redisServer{url: "redis://" + m.Addr() + "/0", mini: true}, nil
}

// RealRedis skips the test when the tests' Redis is the miniredis fallback,
// which has no command named by what (say "BITFIELD"); on a real Redis, as
// CI's, it runs. Call it before Redis or RedisURL's server is used.
func RealRedis(t testing.TB, what string) {
	t.Helper()
	RedisURL(t)
	if redisInst.mini {
		t.Skipf("testenv: miniredis has no %s; this test runs on a real Redis (TEST_REDIS_URL, or one on %s)", what, localRedisAddr)
	}
}

// deletePrefix deletes every key that starts with prefix.
func deletePrefix(ctx context.Context, c redis.UniversalClient, prefix string) error {
	var cursor uint64
	for {
		keys, next, err := c.Scan(ctx, cursor, escapeGlob(prefix)+"*", 500).Result()
		if err != nil {
			return err
		}
		if len(keys) > 0 {
			// One DEL per key: the keys of different tests' subjects may sit
			// in different cluster slots.
			pipe := c.Pipeline()
			for _, k := range keys {
				pipe.Del(ctx, k)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				return err
			}
		}
		cursor = next
		if cursor == 0 {
			return nil
		}
	}
}

// escapeGlob escapes the characters SCAN MATCH treats as patterns.
func escapeGlob(s string) string {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', ']', '\\':
			out = append(out, '\\')
		}
		out = append(out, s[i])
	}
	return string(out)
}
