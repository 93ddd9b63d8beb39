package gateway_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// caddyCheckTimeout is forward_auth's response_header_timeout in
// docs/gateways/Caddyfile.
const caddyCheckTimeout = 2 * time.Second

// TestCaddyForwardAuth runs docs/gateways/Caddyfile in Debian's caddy in
// front of a small upstream, asking a real /v1/check.
func TestCaddyForwardAuth(t *testing.T) {
	caddy := binary(t, "caddy")
	f := newFixture(t, nil)
	check := f.checkServer(t)
	api := newUpstream(t)
	base := startCaddy(t, caddy, caddyConfig(t, hostPort(check.URL), hostPort(api.URL)))

	throughGateway(t, f, api, base)
}

// TestCaddyPortalStopped stops the portal process with SIGSTOP and measures
// Caddy's answer with the shipped configuration (fail closed) and its
// fail-open variant.
func TestCaddyPortalStopped(t *testing.T) {
	caddy := binary(t, "caddy")
	p := startPortalProcess(t)
	api := newUpstream(t)
	conf := caddyConfig(t, p.Addr, hostPort(api.URL))
	closed := startCaddy(t, caddy, conf)
	open := startCaddy(t, caddy, failOpen(t, conf))
	portalStopped(t, p, api, closed, open, caddyCheckTimeout)
}

// caddyConfig is docs/gateways/Caddyfile asking the check at sluice and
// proxying to api; startCaddy gives it a port.
func caddyConfig(t *testing.T, sluice, api string) string {
	t.Helper()
	conf := docConfig(t, "Caddyfile", map[string]string{
		"127.0.0.1:8080": sluice,
		"127.0.0.1:3000": api,
	})
	if !containsLine(conf, "response_header_timeout "+itoa(int(caddyCheckTimeout/time.Second))+"s") {
		t.Fatalf("the Caddyfile's response_header_timeout is not %v", caddyCheckTimeout)
	}
	return conf
}

// startCaddy runs conf in caddy, on a free port in place of the documented
// 127.0.0.1:8000, until the test ends and returns its base URL.
func startCaddy(t *testing.T, caddy, conf string) string {
	t.Helper()
	addr := "127.0.0.1:" + itoa(freePort(t))
	dir := t.TempDir()
	path := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(path, []byte(onPort(t, conf, addr)), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(caddy, "run", "--adapter", "caddyfile", "--config", path)
	// Caddy keeps its state under HOME and XDG directories: the test's own.
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	start(t, cmd, addr)
	return "http://" + addr
}
