package gateway_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"gopkg.in/yaml.v3"

	// The typed configs envoy.yaml names, registered for protojson.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
)

// envoyCheckTimeout is the rate-limit filter's timeout in
// docs/gateways/envoy.yaml.
const envoyCheckTimeout = 2 * time.Second

// TestEnvoyConfig reads docs/gateways/envoy.yaml as Envoy would, into its
// bootstrap configuration with go-control-plane's types (a field Envoy does
// not know fails), runs the types' own validation, and checks what no
// Envoy runs here to show: a timeout on the rate-limit service call, the
// failure mode (closed), Envoy's own answer then (503 with Retry-After and
// a JSON body), and its fail-open variant.
func TestEnvoyConfig(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	b, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "docs", "gateways", "envoy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, variant := range []struct {
		name     string
		conf     string
		failDeny bool
	}{{"Closed", string(b), true}, {"Open", failOpen(t, string(b)), false}} {
		t.Run(variant.name, func(t *testing.T) {
			boot := parseEnvoy(t, variant.conf)
			listeners := boot.GetStaticResources().GetListeners()
			if len(listeners) != 1 {
				t.Fatalf("%d listeners", len(listeners))
			}
			hcm := &hcmv3.HttpConnectionManager{}
			if err := listeners[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(hcm); err != nil {
				t.Fatal(err)
			}
			var rl *ratelimitv3.RateLimit
			for _, f := range hcm.GetHttpFilters() {
				if f.GetName() == "envoy.filters.http.ratelimit" {
					rl = &ratelimitv3.RateLimit{}
					if err := f.GetTypedConfig().UnmarshalTo(rl); err != nil {
						t.Fatal(err)
					}
				}
			}
			if rl == nil {
				t.Fatal("no rate-limit filter")
			}
			if got := rl.GetTimeout().AsDuration(); got != envoyCheckTimeout {
				t.Errorf("rate-limit service timeout %v, want %v", got, envoyCheckTimeout)
			}
			if rl.GetFailureModeDeny() != variant.failDeny {
				t.Errorf("failure_mode_deny %v, want %v", rl.GetFailureModeDeny(), variant.failDeny)
			}
			if rl.GetStatusOnError().GetCode() != typev3.StatusCode_ServiceUnavailable {
				t.Errorf("status_on_error %v, want 503", rl.GetStatusOnError())
			}
			mappers := hcm.GetLocalReplyConfig().GetMappers()
			if len(mappers) != 1 {
				t.Fatalf("%d local reply mappers, want 1", len(mappers))
			}
			m := mappers[0]
			if flags := m.GetFilter().GetResponseFlagFilter().GetFlags(); len(flags) != 1 || flags[0] != "RLSE" {
				t.Errorf("local reply filter %v, want the response flag RLSE alone", m.GetFilter())
			}
			if m.GetStatusCode().GetValue() != 503 {
				t.Errorf("local reply status %v, want 503", m.GetStatusCode())
			}
			if h := m.GetHeadersToAdd(); len(h) != 1 || h[0].GetHeader().GetKey() != "Retry-After" || h[0].GetHeader().GetValue() == "" {
				t.Errorf("local reply headers %v, want Retry-After", h)
			}
			var body struct{ Error string }
			if err := json.Unmarshal([]byte(m.GetBody().GetInlineString()), &body); err != nil || body.Error != "rate_limit_unavailable" {
				t.Errorf("local reply body %q (%v)", m.GetBody().GetInlineString(), err)
			}
			if ct := m.GetBodyFormatOverride().GetContentType(); ct != "application/json" {
				t.Errorf("local reply content type %q", ct)
			}
		})
	}
}

// parseEnvoy decodes an Envoy YAML configuration into its bootstrap type
// and validates it.
func parseEnvoy(t *testing.T, conf string) *bootstrapv3.Bootstrap {
	t.Helper()
	var doc any
	if err := yaml.Unmarshal([]byte(conf), &doc); err != nil {
		t.Fatal(err)
	}
	j, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	boot := &bootstrapv3.Bootstrap{}
	if err := protojson.Unmarshal(j, boot); err != nil {
		t.Fatalf("envoy.yaml is no Envoy bootstrap configuration: %v", err)
	}
	if err := boot.ValidateAll(); err != nil {
		t.Fatalf("envoy.yaml fails Envoy's validation: %v", err)
	}
	return boot
}
