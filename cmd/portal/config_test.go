package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestLoadConfigDefaults(t *testing.T) {
	cfg, rest, err := LoadConfig(nil, envOf(map[string]string{"HOME": "/home/u"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	wantDir := "/home/u/.local/share/sluice"
	if os.Geteuid() == 0 {
		wantDir = "/var/lib/sluice"
	}
	want := Config{
		Addr: ":8080", DataDir: wantDir, AdminEmail: "admin@localhost", RedisFailureMode: "local",
		Instances: 1, RedisPrefix: "sluice:", RedisTimeout: time.Second, ConcurrencyLease: time.Minute, RedisNearCache: 10000, LastUsedInterval: time.Minute, LogLevel: "info", Migrate: true, Demo: true,
		ShutdownTimeout: 15 * time.Second,
	}
	if !equalConfig(cfg, want) || len(rest) != 0 {
		t.Errorf("defaults = %+v, rest %v; want %+v", cfg, rest, want)
	}
}

// TestDefaultDataDir: the documented default data directories (docs/configuration.md), for root and
// for everyone else, whoever runs the test.
func TestDefaultDataDir(t *testing.T) {
	if runtime.GOOS == "windows" || runtime.GOOS == "darwin" {
		t.Skip("the XDG rules are the Unix ones; other systems use os.UserConfigDir")
	}
	tests := []struct {
		name string
		euid int
		env  map[string]string
		want string
	}{
		{"XDGDataHome", 1000, map[string]string{"HOME": "/home/u", "XDG_DATA_HOME": "/data/u"}, "/data/u/sluice"},
		{"HomeOnly", 1000, map[string]string{"HOME": "/home/u"}, "/home/u/.local/share/sluice"},
		{"RootIgnoresHome", 0, map[string]string{"HOME": "/root", "XDG_DATA_HOME": "/root/.data"}, "/var/lib/sluice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := dataDirFor(tt.euid, envOf(tt.env)); got != tt.want {
				t.Errorf("dataDirFor(%d, %v) = %q, want %q", tt.euid, tt.env, got, tt.want)
			}
		})
	}
}

func equalConfig(a, b Config) bool {
	return a.Addr == b.Addr && a.DatabaseURL == b.DatabaseURL && a.RedisURL == b.RedisURL && a.DataDir == b.DataDir &&
		a.AdminEmail == b.AdminEmail && a.AdminPassword == b.AdminPassword && a.AdminToken == b.AdminToken &&
		string(a.SessionSecret) == string(b.SessionSecret) && slices.Equal(a.TrustedProxies, b.TrustedProxies) &&
		a.RedisFailureMode == b.RedisFailureMode && a.Instances == b.Instances && a.RedisPrefix == b.RedisPrefix &&
		a.RedisTimeout == b.RedisTimeout && a.ConcurrencyLease == b.ConcurrencyLease && a.RedisNearCache == b.RedisNearCache && a.LastUsedInterval == b.LastUsedInterval && a.LogJSON == b.LogJSON &&
		a.LogLevel == b.LogLevel && a.Migrate == b.Migrate && a.Demo == b.Demo && a.ShutdownTimeout == b.ShutdownTimeout &&
		a.GRPCAddr == b.GRPCAddr
}

func TestLoadConfigValues(t *testing.T) {
	env := map[string]string{
		"PORTAL_ADDR":               "127.0.0.1:9000",
		"PORTAL_GRPC_ADDR":          ":8081",
		"DATABASE_URL":              "postgres://u:p@db:5432/sluice",
		"REDIS_URL":                 "redis://cache:6379/1",
		"PORTAL_DATA_DIR":           "/srv/sluice",
		"PORTAL_ADMIN_EMAIL":        "ops@example.com",
		"PORTAL_ADMIN_PASSWORD":     "a long password",
		"PORTAL_ADMIN_TOKEN":        strings.Repeat("t", 32),
		"PORTAL_SESSION_SECRET":     strings.Repeat("s", 32),
		"PORTAL_TRUSTED_PROXIES":    "10.0.0.0/8, 192.168.1.1,::ffff:172.16.0.1,2001:db8::/32",
		"PORTAL_REDIS_FAILURE_MODE": "local",
		"PORTAL_INSTANCES":          "4",
		"PORTAL_REDIS_PREFIX":       "sluice:staging:",
		"PORTAL_LAST_USED_INTERVAL": "5s",
		"PORTAL_REDIS_TIMEOUT":      "250ms",
		"PORTAL_REDIS_NEAR_CACHE":   "0",
		"PORTAL_CONCURRENCY_LEASE":  "90s",
		"PORTAL_LOG_FORMAT":         "json",
		"PORTAL_LOG_LEVEL":          "debug",
		"PORTAL_MIGRATE":            "false",
		"PORTAL_DEMO":               "false",
		"PORTAL_SHUTDOWN_TIMEOUT":   "30s",
	}
	want := Config{
		// A bare port listens on loopback without PORTAL_GRPC_TOKEN.
		Addr: "127.0.0.1:9000", GRPCAddr: "127.0.0.1:8081", DatabaseURL: "postgres://u:p@db:5432/sluice", RedisURL: "redis://cache:6379/1",
		DataDir: "/srv/sluice", AdminEmail: "ops@example.com", AdminPassword: "a long password",
		AdminToken: strings.Repeat("t", 32), SessionSecret: []byte(strings.Repeat("s", 32)),
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.168.1.1/32"),
			netip.MustParsePrefix("172.16.0.1/32"), netip.MustParsePrefix("2001:db8::/32")},
		RedisFailureMode: "local", Instances: 4, RedisPrefix: "sluice:staging:", RedisTimeout: 250 * time.Millisecond, ConcurrencyLease: 90 * time.Second, LastUsedInterval: 5 * time.Second, LogJSON: true, LogLevel: "debug", Migrate: false, Demo: false,
		ShutdownTimeout: 30 * time.Second,
	}
	cfg, _, err := LoadConfig(nil, envOf(env), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !equalConfig(cfg, want) {
		t.Errorf("from env:\n got %+v\nwant %+v", cfg, want)
	}

	t.Run("FlagsOverrideTheEnvironment", func(t *testing.T) {
		cfg, rest, err := LoadConfig([]string{"-addr", ":0", "-migrate", "-demo=true", "-log-format=text", "-instances=2", "extra"}, envOf(env), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		w := want
		w.Addr, w.Migrate, w.Demo, w.LogJSON, w.Instances = ":0", true, true, false, 2
		if !equalConfig(cfg, w) || !slices.Equal(rest, []string{"extra"}) {
			t.Errorf("got %+v rest %v, want %+v rest [extra]", cfg, rest, w)
		}
	})
	t.Run("ShorthandFlags", func(t *testing.T) {
		cfg, _, err := LoadConfig([]string{"-log-json", "-no-demo", "-migrate=false"}, envOf(nil), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if !cfg.LogJSON || cfg.Demo || cfg.Migrate {
			t.Errorf("LogJSON=%v Demo=%v Migrate=%v, want true false false", cfg.LogJSON, cfg.Demo, cfg.Migrate)
		}
	})
	t.Run("HelpListsEveryVariable", func(t *testing.T) {
		var out strings.Builder
		_, _, err := LoadConfig([]string{"-h"}, envOf(nil), &out)
		if !errors.Is(err, flag.ErrHelp) {
			t.Fatalf("err %v, want flag.ErrHelp", err)
		}
		all := settings(envOf(nil))
		if len(all) < 19 {
			t.Fatalf("only %d settings", len(all))
		}
		for _, s := range all {
			if !strings.Contains(out.String(), s.env) || !strings.Contains(out.String(), "-"+s.flag) {
				t.Errorf("usage does not list %s (-%s):\n%s", s.env, s.flag, out.String())
			}
		}
	})
}

func TestLoadConfigRejects(t *testing.T) {
	tests := []struct {
		env, value string
		// want appears in the one error line; secrets must not.
		want string
	}{
		{"PORTAL_ADDR", "8080", "invalid PORTAL_ADDR (-addr) \"8080\": not host:port; want a listen address host:port"},
		{"PORTAL_ADDR", ":99999", "invalid PORTAL_ADDR (-addr) \":99999\": port must be 0-65535"},
		{"PORTAL_GRPC_ADDR", "8081", "invalid PORTAL_GRPC_ADDR (-grpc-addr) \"8081\": not host:port"},
		{"DATABASE_URL", "postgres://u:hunter2@db:notaport/x", "invalid DATABASE_URL (-database-url) (value hidden): not a valid URL; want a postgres://"},
		{"REDIS_URL", "http://u:hunter2@cache", "invalid REDIS_URL (-redis-url) (value hidden): scheme \"http\" is not redis"},
		{"REDIS_URL", "redis+sentinel://u:hunter2@cache:26379", "invalid REDIS_URL (-redis-url) (value hidden): a Sentinel URL needs master_name="},
		{"PORTAL_ADMIN_EMAIL", "not-an-email", "invalid PORTAL_ADMIN_EMAIL (-admin-email) \"not-an-email\": is not a valid address"},
		{"PORTAL_ADMIN_PASSWORD", "hunter2", "invalid PORTAL_ADMIN_PASSWORD (-admin-password) (value hidden): must be at least 12 characters"},
		{"PORTAL_ADMIN_TOKEN", "hunter2", "invalid PORTAL_ADMIN_TOKEN (-admin-token) (value hidden): 7 characters; want at least 32 characters"},
		{"PORTAL_SESSION_SECRET", "hunter2", "invalid PORTAL_SESSION_SECRET (-session-secret) (value hidden): 7 bytes; want at least 32 bytes"},
		{"PORTAL_TRUSTED_PROXIES", "10.0.0.0/8,proxy.local", "invalid PORTAL_TRUSTED_PROXIES (-trusted-proxies) \"10.0.0.0/8,proxy.local\": trusted proxy \"proxy.local\""},
		{"PORTAL_TRUSTED_PROXIES", "10.0.0.0/33", "trusted proxy \"10.0.0.0/33\""},
		{"PORTAL_REDIS_FAILURE_MODE", "maybe", "invalid PORTAL_REDIS_FAILURE_MODE (-redis-failure-mode) \"maybe\": unknown mode; want local (per-instance memory counters, limits divided by PORTAL_INSTANCES), open (admit, marked degraded) or closed (503)"},
		{"PORTAL_INSTANCES", "0", "invalid PORTAL_INSTANCES (-instances) \"0\": out of range; want a whole number from 1 to 1000"},
		{"PORTAL_INSTANCES", "two", "invalid PORTAL_INSTANCES (-instances) \"two\""},
		{"PORTAL_REDIS_PREFIX", "app:{x}:", "invalid PORTAL_REDIS_PREFIX (-redis-prefix) \"app:{x}:\": contains a brace or a space; want 1 to 64 characters"},
		{"PORTAL_REDIS_PREFIX", "my app:", "invalid PORTAL_REDIS_PREFIX (-redis-prefix) \"my app:\": contains a brace or a space"},
		{"PORTAL_REDIS_PREFIX", strings.Repeat("p", 65), "invalid PORTAL_REDIS_PREFIX (-redis-prefix) \"" + strings.Repeat("p", 65) + "\": length out of range"},
		{"PORTAL_REDIS_TIMEOUT", "0", "invalid PORTAL_REDIS_TIMEOUT (-redis-timeout) \"0\": out of range; want a duration from 1ms to 10s"},
		{"PORTAL_REDIS_TIMEOUT", "1m", "invalid PORTAL_REDIS_TIMEOUT (-redis-timeout) \"1m\": out of range"},
		{"PORTAL_CONCURRENCY_LEASE", "500ms", "invalid PORTAL_CONCURRENCY_LEASE (-concurrency-lease) \"500ms\": out of range; want a duration from 1s to 1h, e.g. 60s"},
		{"PORTAL_CONCURRENCY_LEASE", "2h", "invalid PORTAL_CONCURRENCY_LEASE (-concurrency-lease) \"2h\": out of range"},
		{"PORTAL_REDIS_NEAR_CACHE", "-1", "invalid PORTAL_REDIS_NEAR_CACHE (-redis-near-cache) \"-1\": out of range; want a whole number from 0 (off) to 1000000"},
		{"PORTAL_REDIS_NEAR_CACHE", "lots", "invalid PORTAL_REDIS_NEAR_CACHE (-redis-near-cache) \"lots\": out of range"},
		{"PORTAL_LAST_USED_INTERVAL", "10ms", "invalid PORTAL_LAST_USED_INTERVAL (-last-used-interval) \"10ms\": out of range; want a duration from 1s to 1h"},
		{"PORTAL_LAST_USED_INTERVAL", "2h", "invalid PORTAL_LAST_USED_INTERVAL (-last-used-interval) \"2h\": out of range"},
		{"PORTAL_LOG_FORMAT", "xml", "invalid PORTAL_LOG_FORMAT (-log-format) \"xml\": unknown format; want text or json"},
		{"PORTAL_LOG_LEVEL", "loud", "invalid PORTAL_LOG_LEVEL (-log-level) \"loud\": unknown level; want debug, info, warn or error"},
		{"PORTAL_MIGRATE", "sometimes", "invalid PORTAL_MIGRATE (-migrate) \"sometimes\""},
		{"PORTAL_DEMO", "yes please", "invalid PORTAL_DEMO (-demo) \"yes please\""},
		{"PORTAL_DEBUG_ADDR", "6060", "invalid PORTAL_DEBUG_ADDR (-debug-addr) \"6060\": not host:port; want a listen address host:port for /debug/pprof/ alone"},
		{"PORTAL_SHUTDOWN_TIMEOUT", "forever", "invalid PORTAL_SHUTDOWN_TIMEOUT (-shutdown-timeout) \"forever\": out of range; want a duration"},
	}
	for _, tt := range tests {
		t.Run(tt.env+"="+tt.value, func(t *testing.T) {
			_, _, err := LoadConfig(nil, envOf(map[string]string{tt.env: tt.value}), io.Discard)
			if err == nil {
				t.Fatal("accepted")
			}
			msg := err.Error()
			if !strings.Contains(msg, tt.want) {
				t.Errorf("error %q\nwant it to contain %q", msg, tt.want)
			}
			if strings.Count(msg, "\n") != 0 {
				t.Errorf("one bad variable gave %d lines: %q", strings.Count(msg, "\n")+1, msg)
			}
			if strings.Contains(msg, "hunter2") {
				t.Errorf("error reveals a secret: %q", msg)
			}
		})
	}
	t.Run("EveryBadVariableOneLineEach", func(t *testing.T) {
		_, _, err := LoadConfig(nil, envOf(map[string]string{"PORTAL_ADDR": "x", "PORTAL_INSTANCES": "-1", "PORTAL_LOG_FORMAT": "xml"}), io.Discard)
		if err == nil || strings.Count(err.Error(), "\n") != 2 {
			t.Errorf("error = %q, want three lines", err)
		}
	})
	t.Run("DebugAddrNotThePublicOne", func(t *testing.T) {
		_, _, err := LoadConfig(nil, envOf(map[string]string{"PORTAL_ADDR": "127.0.0.1:8080", "PORTAL_DEBUG_ADDR": "127.0.0.1:8080"}), io.Discard)
		if err == nil || !strings.Contains(err.Error(), "invalid PORTAL_DEBUG_ADDR (-debug-addr) \"127.0.0.1:8080\": the same as PORTAL_ADDR") {
			t.Errorf("error = %v, want PORTAL_DEBUG_ADDR refused", err)
		}
	})
	t.Run("FlagValuesAreCheckedToo", func(t *testing.T) {
		_, _, err := LoadConfig([]string{"-redis-failure-mode=never"}, envOf(nil), io.Discard)
		if err == nil || !strings.Contains(err.Error(), "PORTAL_REDIS_FAILURE_MODE (-redis-failure-mode)") {
			t.Errorf("error = %v, want the variable and flag named", err)
		}
	})
}

func TestRedisOptions(t *testing.T) {
	tests := []struct {
		url      string
		desc     string
		addrs    []string
		master   string
		cluster  bool
		db       int
		password string
		tls      bool
	}{
		{"redis://127.0.0.1:6379/2", "redis server at 127.0.0.1:6379", []string{"127.0.0.1:6379"}, "", false, 2, "", false},
		{"rediss://:pw@cache.example.com:6380", "redis server at cache.example.com:6380", []string{"cache.example.com:6380"}, "", false, 0, "pw", true},
		{"redis://s1:26379?master_name=main&addr=s2:26379", "redis sentinel at s1:26379,s2:26379", []string{"s1:26379", "s2:26379"}, "main", false, 0, "", false},
		{"redis+sentinel://s1:26379?master_name=main", "redis sentinel at s1:26379", []string{"s1:26379"}, "main", false, 0, "", false},
		{"redis+cluster://:pw@n1:7000", "redis cluster at n1:7000", []string{"n1:7000"}, "", true, 0, "pw", false},
		{"redis://n1:7000?addr=n2:7000", "redis cluster at n1:7000,n2:7000", []string{"n1:7000", "n2:7000"}, "", true, 0, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			o, desc, err := redisOptions(tt.url)
			if err != nil {
				t.Fatal(err)
			}
			if desc != tt.desc || !slices.Equal(o.Addrs, tt.addrs) || o.MasterName != tt.master || o.IsClusterMode != tt.cluster ||
				o.DB != tt.db || o.Password != tt.password || (o.TLSConfig != nil) != tt.tls {
				t.Errorf("got desc %q addrs %v master %q cluster %v db %d password %q tls %v",
					desc, o.Addrs, o.MasterName, o.IsClusterMode, o.DB, o.Password, o.TLSConfig != nil)
			}
		})
	}
}

// TestConfigurationDocListsEverySetting: docs/configuration.md has a row
// for every variable, with its flag and the code's default, and no row (a
// variable with a flag) the code does not read, so the documentation cannot
// fall behind the code.
func TestConfigurationDocListsEverySetting(t *testing.T) {
	b, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string][]string{}
	for _, line := range strings.Split(string(b), "\n") {
		cells := strings.Split(line, " | ")
		if len(cells) >= 4 && strings.HasPrefix(cells[0], "| `") && strings.HasPrefix(cells[1], "`-") {
			rows[strings.Trim(cells[0], "| `")] = cells
		}
	}
	for _, s := range settings(envOf(nil)) {
		cells, ok := rows[s.env]
		if !ok {
			t.Errorf("docs/configuration.md has no row for %s", s.env)
			continue
		}
		if !strings.HasPrefix(cells[1], "`-"+s.flag+"`") {
			t.Errorf("%s: flag cell %q, want it to start with `-%s`", s.env, cells[1], s.flag)
		}
		if msg := checkDocDefault(s, cells[2]); msg != "" {
			t.Errorf("%s: default cell %q: %s", s.env, cells[2], msg)
		}
	}
	if len(rows) != len(settings(envOf(nil))) {
		t.Errorf("docs/configuration.md has %d rows, the code %d settings", len(rows), len(settings(envOf(nil))))
	}
}

// checkDocDefault compares a documented default with the code's: "unset..."
// for an empty default, else the first value in backquotes, durations
// compared as durations (15m is 15m0s). The data directory depends on who
// runs the portal, so its cell must name root's and everyone else's.
func checkDocDefault(s setting, cell string) string {
	switch {
	case s.env == "PORTAL_DATA_DIR":
		if !strings.Contains(cell, dataDirFor(0, envOf(nil))) || !strings.Contains(cell, "~/.local/share/sluice") {
			return "does not name the data directories dataDirFor picks"
		}
		return ""
	case s.def == "":
		if !strings.HasPrefix(cell, "unset") {
			return "the code has no default: want \"unset...\""
		}
		return ""
	}
	_, rest, ok := strings.Cut(cell, "`")
	doc, _, ok2 := strings.Cut(rest, "`")
	if !ok || !ok2 {
		return "no default in backquotes"
	}
	if doc == s.def {
		return ""
	}
	d1, err1 := time.ParseDuration(doc)
	d2, err2 := time.ParseDuration(s.def)
	if err1 == nil && err2 == nil && d1 == d2 {
		return ""
	}
	return fmt.Sprintf("documents %q, the code's default is %q", doc, s.def)
}
