package main

import (
	"io"
	"strings"
	"testing"
)

// TestLoadConfigSubjectSettings covers the settings that bound subjects:
// their defaults, values, and a one-line error naming the variable.
func TestLoadConfigSubjectSettings(t *testing.T) {
	t.Run("Defaults", func(t *testing.T) {
		cfg, _, err := LoadConfig(nil, envOf(nil), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.AnonPrefixes.IPv4 != 32 || cfg.AnonPrefixes.IPv6 != 64 || cfg.KeysPerDeveloper != 20 || cfg.MemoryMaxSubjects != 0 {
			t.Fatalf("defaults: prefixes %+v, keys %d, subjects %d; want 32, 64, 20 and 0 (by memory)", cfg.AnonPrefixes, cfg.KeysPerDeveloper, cfg.MemoryMaxSubjects)
		}
	})
	t.Run("Values", func(t *testing.T) {
		cfg, _, err := LoadConfig([]string{"-keys-per-developer=5"}, envOf(map[string]string{
			"PORTAL_ANON_IPV4_PREFIX": "24", "PORTAL_ANON_IPV6_PREFIX": "56", "PORTAL_KEYS_PER_DEVELOPER": "50",
		}), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.AnonPrefixes.IPv4 != 24 || cfg.AnonPrefixes.IPv6 != 56 || cfg.KeysPerDeveloper != 5 {
			t.Fatalf("got prefixes %+v, keys %d; want 24, 56 and the flag's 5", cfg.AnonPrefixes, cfg.KeysPerDeveloper)
		}
	})
	for _, tt := range []struct {
		value string
		want  int
	}{{"auto", 0}, {"0", 0}, {"1000", 1000}, {"200000", 200_000}, {"100000000", 100_000_000}} {
		t.Run("MemoryMaxSubjects="+tt.value, func(t *testing.T) {
			cfg, _, err := LoadConfig(nil, envOf(map[string]string{"PORTAL_MEMORY_MAX_SUBJECTS": tt.value}), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.MemoryMaxSubjects != tt.want {
				t.Fatalf("MemoryMaxSubjects = %d, want %d", cfg.MemoryMaxSubjects, tt.want)
			}
		})
	}
	for _, tt := range []struct{ env, value string }{
		{"PORTAL_ANON_IPV4_PREFIX", "33"},
		{"PORTAL_ANON_IPV4_PREFIX", "0"},
		{"PORTAL_ANON_IPV6_PREFIX", "129"},
		{"PORTAL_ANON_IPV6_PREFIX", "sixty-four"},
		{"PORTAL_KEYS_PER_DEVELOPER", "0"},
		{"PORTAL_MEMORY_MAX_SUBJECTS", "999"},
		{"PORTAL_MEMORY_MAX_SUBJECTS", "100000001"},
		{"PORTAL_MEMORY_MAX_SUBJECTS", "Auto"},
		{"PORTAL_MEMORY_MAX_SUBJECTS", "-1"},
	} {
		t.Run("Rejects"+tt.env+"="+tt.value, func(t *testing.T) {
			_, _, err := LoadConfig(nil, envOf(map[string]string{tt.env: tt.value}), io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.env) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("err = %v, want one line naming %s", err, tt.env)
			}
		})
	}
}

func TestLoadConfigStreamAndDashboardSettings(t *testing.T) {
	cfg, _, err := LoadConfig(nil, envOf(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.StreamsPerUser != 3 || cfg.StreamsMax != 256 || cfg.DashboardRedisPool != 4 || cfg.DashboardRedisTimeout.String() != "1s" {
		t.Fatalf("defaults: streams %d/%d, dashboard pool %d timeout %s; want 3/256, 4, 1s",
			cfg.StreamsPerUser, cfg.StreamsMax, cfg.DashboardRedisPool, cfg.DashboardRedisTimeout)
	}
	for _, tt := range []struct{ env, value string }{
		{"PORTAL_STREAMS_PER_USER", "0"},
		{"PORTAL_STREAMS_MAX", "100001"},
		{"PORTAL_DASHBOARD_REDIS_POOL", "0"},
		{"PORTAL_DASHBOARD_REDIS_TIMEOUT", "1ms"},
	} {
		_, _, err := LoadConfig(nil, envOf(map[string]string{tt.env: tt.value}), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.env) {
			t.Errorf("%s=%s: err = %v, want one naming the variable", tt.env, tt.value, err)
		}
	}
}
