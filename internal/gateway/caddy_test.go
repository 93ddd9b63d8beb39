package gateway_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestCaddyForwardAuth runs docs/gateways/Caddyfile in Debian's caddy in
// front of a small upstream, asking a real /v1/check.
func TestCaddyForwardAuth(t *testing.T) {
	caddy := binary(t, "caddy")
	f := newFixture(t, nil)
	check := f.checkServer(t)
	api := newUpstream(t)
	port := itoa(freePort(t))

	dir := t.TempDir()
	conf := filepath.Join(dir, "Caddyfile")
	site := docConfig(t, "Caddyfile", map[string]string{
		"127.0.0.1:8080": hostPort(check.URL),
		"127.0.0.1:3000": hostPort(api.URL),
		"127.0.0.1:8000": "127.0.0.1:" + port,
	})
	if err := os.WriteFile(conf, []byte(site), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(caddy, "run", "--adapter", "caddyfile", "--config", conf)
	// Caddy keeps its state under HOME and XDG directories: the test's own.
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	start(t, cmd, "127.0.0.1:"+port)

	throughGateway(t, f, api, "http://127.0.0.1:"+port)
}
