package main

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/tokenlimit"
)

// TestTokenDoorsAreRateLimited sends 300 wrong tokens, as fast as one
// client can, to each door that takes a token (issue 30, item 12): each
// answers 401 to the first PORTAL_TOKEN_FAILURES_PER_MINUTE (20) of them
// and 429 with Retry-After to the rest.
func TestTokenDoorsAreRateLimited(t *testing.T) {
	env := baseEnv(t)
	env["DATABASE_URL"] = testenv.PostgresURL(t)
	p := startPortal(t, env)
	for _, path := range []string{"/admin/api/v1/plans", "/v1/policy"} {
		t.Run(path, func(t *testing.T) {
			statuses := map[int]int{}
			for i := range 300 {
				req, _ := http.NewRequest(http.MethodGet, p.url+path, nil)
				req.Header.Set("Authorization", "Bearer sluice_op_guess"+strings.Repeat("x", i%7))
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				statuses[res.StatusCode]++
				if res.StatusCode == http.StatusTooManyRequests && res.Header.Get("Retry-After") == "" {
					t.Fatal("429 without Retry-After")
				}
			}
			if statuses[http.StatusUnauthorized] != tokenlimit.DefaultFailures || statuses[http.StatusTooManyRequests] != 300-tokenlimit.DefaultFailures {
				t.Errorf("300 wrong tokens: statuses %v, want %d answered 401 and %d answered 429",
					statuses, tokenlimit.DefaultFailures, 300-tokenlimit.DefaultFailures)
			}
		})
	}
}

// TestMetricsPrivateByDefault: /metrics is on a loopback listener of its
// own unless the operator says otherwise, never on PORTAL_ADDR without a
// token (issue 30, item 12).
func TestMetricsPrivateByDefault(t *testing.T) {
	t.Run("Default", func(t *testing.T) {
		env := baseEnv(t)
		delete(env, "PORTAL_METRICS_ADDR")
		cfg, _, err := LoadConfig(nil, envOf(env), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.MetricsAddr != "127.0.0.1:9464" {
			t.Errorf("default PORTAL_METRICS_ADDR = %q, want loopback port 9464", cfg.MetricsAddr)
		}
		// The portal itself on the default's host with any free port: the
		// default's own port may be taken on a machine running a portal.
		env["PORTAL_METRICS_ADDR"] = "127.0.0.1:0"
		env["DATABASE_URL"] = testenv.PostgresURL(t)
		p := startPortal(t, env)
		if status, _ := get(t, p.url+"/metrics"); status != http.StatusNotFound {
			t.Errorf("/metrics on PORTAL_ADDR: status %d, want 404", status)
		}
		if got := p.metricsURL(t); !strings.HasPrefix(got, "http://127.0.0.1:") {
			t.Errorf("metrics served on %s, want a loopback address", got)
		}
		if status, body := get(t, p.metricsURL(t)); status != http.StatusOK || !strings.Contains(body, "go_goroutines") {
			t.Errorf("/metrics on the loopback listener: status %d", status)
		}
	})
	t.Run("Off", func(t *testing.T) {
		env := baseEnv(t)
		env["PORTAL_METRICS_ADDR"] = "off"
		env["DATABASE_URL"] = testenv.PostgresURL(t)
		p := startPortal(t, env)
		if metricsRE.MatchString(p.out.String()) {
			t.Errorf("a metrics address was printed with PORTAL_METRICS_ADDR=off:\n%s", p.out)
		}
		if status, _ := get(t, p.url+"/metrics"); status != http.StatusNotFound {
			t.Errorf("/metrics on PORTAL_ADDR: status %d, want 404", status)
		}
	})
	t.Run("PublicNeedsAToken", func(t *testing.T) {
		env := baseEnv(t)
		env["PORTAL_METRICS_ADDR"] = "public"
		_, _, err := LoadConfig(nil, envOf(env), io.Discard)
		if err == nil || !strings.Contains(err.Error(), "PORTAL_METRICS_TOKEN") {
			t.Fatalf("public without a token: %v, want a refusal naming PORTAL_METRICS_TOKEN", err)
		}
		token := strings.Repeat("m", 40)
		env["PORTAL_METRICS_TOKEN"] = token
		env["DATABASE_URL"] = testenv.PostgresURL(t)
		p := startPortal(t, env)
		if status, _ := get(t, p.url+"/metrics"); status != http.StatusUnauthorized {
			t.Errorf("/metrics on PORTAL_ADDR without the token: status %d, want 401", status)
		}
		req, _ := http.NewRequest(http.MethodGet, p.url+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Errorf("/metrics on PORTAL_ADDR with the token: status %d, want 200", res.StatusCode)
		}
	})
}
