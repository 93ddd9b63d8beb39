package gateway_test

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/gateway"
)

// TestGatewaysDocLinksTheTestedConfigs keeps docs/gateways.md linking every
// configuration under docs/gateways (the files the nginx and Caddy tests
// run, so what a reader copies is what was tested), and the Envoy and
// Traefik files naming the entries and the path the service reads.
func TestGatewaysDocLinksTheTestedConfigs(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	page, err := os.ReadFile(filepath.Join(root, "docs", "gateways.md"))
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(filepath.Join(root, "docs", "gateways"))
	if err != nil {
		t.Fatal(err)
	}
	linked := map[string]bool{}
	for _, e := range entries {
		if !strings.Contains(string(page), "](gateways/"+e.Name()+")") {
			t.Errorf("docs/gateways.md does not link docs/gateways/%s", e.Name())
		}
		linked[e.Name()] = true
	}
	for _, name := range []string{"nginx.conf", "Caddyfile", "traefik.yml", "envoy.yaml"} {
		if !linked[name] {
			t.Errorf("docs/gateways/%s is missing", name)
		}
	}
	envoy, _ := os.ReadFile(filepath.Join(root, "docs", "gateways", "envoy.yaml"))
	for _, key := range []string{gateway.EntryMethod, gateway.EntryPath, gateway.EntryHost, gateway.EntryAuthorization, gateway.EntryAPIKey} {
		if !strings.Contains(string(envoy), "descriptor_key: "+key+"}") && !strings.Contains(string(envoy), "descriptor_key: "+key+",") {
			t.Errorf("envoy.yaml sends no %q entry", key)
		}
	}
	if !strings.Contains(string(envoy), "remote_address: {}") {
		t.Error("envoy.yaml sends no remote_address entry")
	}
	traefik, _ := os.ReadFile(filepath.Join(root, "docs", "gateways", "traefik.yml"))
	if !strings.Contains(string(traefik), gateway.CheckPath) {
		t.Error("traefik.yml does not ask /v1/check")
	}
}
