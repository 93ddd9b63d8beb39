package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
)

func TestRequireBearer(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	token := strings.Repeat("m", 32)
	for _, tt := range []struct {
		name, token, header string
		want                int
	}{
		{"NoTokenConfigured", "", "", http.StatusOK},
		{"Missing", token, "", http.StatusUnauthorized},
		{"Wrong", token, "Bearer " + strings.Repeat("x", 32), http.StatusUnauthorized},
		{"Prefix", token, "Bearer " + token[:31], http.StatusUnauthorized},
		{"NotBearer", token, "Basic " + token, http.StatusUnauthorized},
		{"Right", token, "Bearer " + token, http.StatusOK},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
			if tt.header != "" {
				req.Header.Set("Authorization", tt.header)
			}
			requireBearer(tt.token, ok).ServeHTTP(rec, req)
			if rec.Code != tt.want {
				t.Fatalf("status %d, want %d", rec.Code, tt.want)
			}
			if tt.want == http.StatusUnauthorized && rec.Header().Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
		})
	}
}

var metricsRE = regexp.MustCompile(`Metrics are served on (http://\S+)`)

func TestMetricsOnTheirOwnAddressBehindAToken(t *testing.T) {
	token := strings.Repeat("t", 40)
	env := baseEnv(t)
	env["DATABASE_URL"] = testenv.PostgresURL(t)
	env["PORTAL_METRICS_ADDR"] = "127.0.0.1:0"
	env["PORTAL_METRICS_TOKEN"] = token
	p := startPortal(t, env)
	// The metrics address is printed before the main one, which
	// startPortal has waited for.
	m := metricsRE.FindStringSubmatch(p.out.String())
	if m == nil {
		t.Fatalf("no metrics address printed:\n%s", p.out)
	}
	metricsURL := m[1]
	if status, _ := get(t, p.url+"/metrics"); status != http.StatusNotFound {
		t.Errorf("/metrics on PORTAL_ADDR: status %d, want 404", status)
	}
	if status, _ := get(t, metricsURL); status != http.StatusUnauthorized {
		t.Errorf("/metrics without the token: status %d, want 401", status)
	}
	req, _ := http.NewRequest(http.MethodGet, metricsURL, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.Contains(string(body), "go_goroutines") {
		t.Errorf("/metrics with the token: status %d, body %.100q", res.StatusCode, body)
	}
	if strings.Contains(p.out.String(), token) {
		t.Error("the metrics token was printed")
	}
}

var profilerRE = regexp.MustCompile(`The profiler is served on (http://\S+)/debug/pprof/`)

func TestProfilerOnlyOnTheDebugAddress(t *testing.T) {
	t.Run("OffByDefault", func(t *testing.T) {
		env := baseEnv(t)
		env["DATABASE_URL"] = testenv.PostgresURL(t)
		p := startPortal(t, env)
		if profilerRE.MatchString(p.out.String()) {
			t.Errorf("a profiler address was printed without PORTAL_DEBUG_ADDR:\n%s", p.out)
		}
		if status, body := get(t, p.url+"/debug/pprof/"); status == http.StatusOK || strings.Contains(body, "goroutine") {
			t.Errorf("/debug/pprof/ on PORTAL_ADDR: status %d, body %.100q", status, body)
		}
	})
	t.Run("OnItsOwnAddress", func(t *testing.T) {
		env := baseEnv(t)
		env["DATABASE_URL"] = testenv.PostgresURL(t)
		env["PORTAL_DEBUG_ADDR"] = "127.0.0.1:0"
		p := startPortal(t, env)
		m := profilerRE.FindStringSubmatch(p.out.String())
		if m == nil {
			t.Fatalf("no profiler address printed:\n%s", p.out)
		}
		if status, body := get(t, p.url+"/debug/pprof/"); status == http.StatusOK || strings.Contains(body, "goroutine") {
			t.Errorf("/debug/pprof/ on PORTAL_ADDR: status %d, body %.100q", status, body)
		}
		status, body := get(t, m[1]+"/debug/pprof/goroutine?debug=1")
		if status != http.StatusOK || !strings.Contains(body, "goroutine profile: total") {
			t.Errorf("goroutine profile on PORTAL_DEBUG_ADDR: status %d, body %.100q", status, body)
		}
	})
}

func TestSecuritySettings(t *testing.T) {
	env := map[string]string{
		"HOME":                                "/home/u",
		"PORTAL_METRICS_ADDR":                 "127.0.0.1:9090",
		"PORTAL_METRICS_TOKEN":                strings.Repeat("t", 32),
		"PORTAL_SIGNIN_ADDRESS_FAILURES":      "50",
		"PORTAL_SIGNIN_PAIR_FAILURES":         "5",
		"PORTAL_SIGNIN_WINDOW":                "30m",
		"PORTAL_SIGNIN_ACCOUNT_FREE_FAILURES": "3",
		"PORTAL_SIGNIN_ACCOUNT_MAX_DELAY":     "2m",
	}
	cfg, _, err := LoadConfig(nil, envOf(env), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.SignIn
	if cfg.MetricsAddr != "127.0.0.1:9090" || cfg.MetricsToken != env["PORTAL_METRICS_TOKEN"] ||
		p.AddressFailures != 50 || p.PairFailures != 5 || p.Window != 30*time.Minute || p.AccountFreeFailures != 3 || p.AccountMaxDelay != 2*time.Minute {
		t.Errorf("config %+v", cfg)
	}
	def, _, err := LoadConfig(nil, envOf(map[string]string{"HOME": "/home/u"}), io.Discard)
	if err != nil || def.SignIn.Validate() != nil || def.MetricsAddr != "127.0.0.1:9464" || def.MetricsPublic || def.MetricsToken != "" {
		t.Errorf("defaults: %+v, %v", def.SignIn, err)
	}
	for _, tt := range []struct{ env, value, want string }{
		{"PORTAL_METRICS_ADDR", "9090", `invalid PORTAL_METRICS_ADDR (-metrics-addr) "9090": not host:port`},
		{"PORTAL_METRICS_TOKEN", "short-secret", "invalid PORTAL_METRICS_TOKEN (-metrics-token) (value hidden): 12 characters; want at least 32"},
		{"PORTAL_SIGNIN_ADDRESS_FAILURES", "0", `invalid PORTAL_SIGNIN_ADDRESS_FAILURES (-signin-address-failures) "0": out of range`},
		{"PORTAL_SIGNIN_PAIR_FAILURES", "many", `invalid PORTAL_SIGNIN_PAIR_FAILURES (-signin-pair-failures) "many": out of range`},
		{"PORTAL_SIGNIN_WINDOW", "25h", `invalid PORTAL_SIGNIN_WINDOW (-signin-window) "25h": out of range; want a duration from 1s to 24h`},
		{"PORTAL_SIGNIN_ACCOUNT_FREE_FAILURES", "-1", `invalid PORTAL_SIGNIN_ACCOUNT_FREE_FAILURES (-signin-account-free-failures) "-1": out of range`},
		{"PORTAL_SIGNIN_ACCOUNT_MAX_DELAY", "0s", `invalid PORTAL_SIGNIN_ACCOUNT_MAX_DELAY (-signin-account-max-delay) "0s": out of range`},
	} {
		t.Run(tt.env, func(t *testing.T) {
			_, _, err := LoadConfig(nil, envOf(map[string]string{"HOME": "/home/u", tt.env: tt.value}), io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Count(err.Error(), "\n") != 0 {
				t.Fatalf("error %v, want one line containing %q", err, tt.want)
			}
			if tt.env == "PORTAL_METRICS_TOKEN" && strings.Contains(err.Error(), tt.value) {
				t.Error("the token is echoed")
			}
		})
	}
}
