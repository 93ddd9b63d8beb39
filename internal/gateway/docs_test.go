package gateway_test

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/gateway"
)

// TestREADMEQuotesTheTestedConfigs keeps the README's gateway
// configurations identical to the files under docs/gateways, which the
// nginx and Caddy tests run, and the Envoy file naming the descriptor
// entries the service reads.
func TestREADMEQuotesTheTestedConfigs(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"nginx.conf", "Caddyfile", "traefik.yml", "envoy.yaml"} {
		b, err := os.ReadFile(filepath.Join(root, "docs", "gateways", name))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(readme), strings.TrimRight(string(b), "\n")) {
			t.Errorf("README.md does not quote docs/gateways/%s as it is", name)
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
