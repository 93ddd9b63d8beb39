// Package testenv gives tests their own Postgres database and Redis key space
// on whatever servers the machine offers, so `go test ./...` passes both on a
// fresh machine and in CI:
//
//   - Postgres: TEST_DATABASE_URL, else DATABASE_URL, else 127.0.0.1:5432 as
//     user postgres, else an embedded Postgres started once per test binary.
//   - Redis: TEST_REDIS_URL, else REDIS_URL, else 127.0.0.1:6379, else an
//     in-process miniredis.
//
// TEST_DATABASE_URL=embedded and TEST_REDIS_URL=miniredis force the
// fallbacks, to check that the suite passes on a machine without servers.
//
// With TEST_REQUIRE_SERVICES=1 a missing server fails the test instead of
// falling back, so CI cannot silently test against substitutes.
package testenv

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
)

// requireServices reports whether TEST_REQUIRE_SERVICES asks for real servers.
func requireServices() bool {
	v := os.Getenv("TEST_REQUIRE_SERVICES")
	return v == "1" || v == "true"
}

// firstEnv returns the first non-empty value among the named variables.
func firstEnv(names ...string) string {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return v
		}
	}
	return ""
}

// randomSuffix returns n random bytes as lowercase hex, safe in database
// names and Redis keys.
func randomSuffix(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("testenv: random name: %v", err)
	}
	return hex.EncodeToString(b)
}
