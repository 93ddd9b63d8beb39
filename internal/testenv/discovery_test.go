package testenv

import (
	"strings"
	"testing"
)

// nowhere is an address where nothing listens.
const nowhere = "127.0.0.1:1"

func TestDiscovery(t *testing.T) {
	tests := []struct {
		name      string
		env       map[string]string
		wantURL   string // prefix of the chosen URL; "" when an error is wanted
		wantError string
	}{
		{"PostgresFromTestVariable", map[string]string{"TEST_DATABASE_URL": "postgres://a@db:1/x", "DATABASE_URL": "postgres://b@db:1/x"}, "postgres://a@db:1/x", ""},
		{"PostgresFromDatabaseURL", map[string]string{"TEST_DATABASE_URL": "", "DATABASE_URL": "postgres://b@db:1/x"}, "postgres://b@db:1/x", ""},
		{"PostgresRequiredButMissing", map[string]string{"TEST_DATABASE_URL": "", "DATABASE_URL": "", "TEST_REQUIRE_SERVICES": "1"}, "", "TEST_REQUIRE_SERVICES=1 but TEST_DATABASE_URL and DATABASE_URL are unset and nothing answers on 127.0.0.1:1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			u, err := findPostgres(nowhere)
			if tt.wantError != "" {
				if err == nil || err.Error() != tt.wantError {
					t.Errorf("findPostgres = %q, %v; want error %q", u, err, tt.wantError)
				}
				return
			}
			if err != nil || !strings.HasPrefix(u, tt.wantURL) {
				t.Errorf("findPostgres = %q, %v; want %q", u, err, tt.wantURL)
			}
		})
	}

	redisTests := []struct {
		name      string
		env       map[string]string
		wantURL   string
		wantError string
	}{
		{"RedisFromTestVariable", map[string]string{"TEST_REDIS_URL": "redis://a:1/0", "REDIS_URL": "redis://b:1/0"}, "redis://a:1/0", ""},
		{"RedisFromRedisURL", map[string]string{"TEST_REDIS_URL": "", "REDIS_URL": "redis://b:1/0"}, "redis://b:1/0", ""},
		{"RedisFallsBackToMiniredis", map[string]string{"TEST_REDIS_URL": "", "REDIS_URL": "", "TEST_REQUIRE_SERVICES": ""}, "redis://127.0.0.1:", ""},
		{"RedisRequiredButMissing", map[string]string{"TEST_REDIS_URL": "", "REDIS_URL": "", "TEST_REQUIRE_SERVICES": "1"}, "", "TEST_REQUIRE_SERVICES=1 but TEST_REDIS_URL and REDIS_URL are unset and nothing answers on 127.0.0.1:1"},
	}
	for _, tt := range redisTests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			s, err := findRedis(nowhere)
			if tt.wantError != "" {
				if err == nil || err.Error() != tt.wantError {
					t.Errorf("findRedis = %+v, %v; want error %q", s, err, tt.wantError)
				}
				return
			}
			if err != nil || !strings.HasPrefix(s.url, tt.wantURL) {
				t.Errorf("findRedis = %+v, %v; want %q", s, err, tt.wantURL)
			}
		})
	}
}
