package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/testenv"
)

// otlpReceiver is an OTLP/HTTP trace receiver: it decodes what the
// portal's exporter posts to /v1/traces with the protocol's own types.
type otlpReceiver struct {
	mu    sync.Mutex
	spans []*tracepb.Span
	names []string // service.name of each span's resource
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	var req coltracepb.ExportTraceServiceRequest
	if err != nil || r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
		http.Error(w, "not an OTLP/HTTP trace export", http.StatusBadRequest)
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, a := range rs.GetResource().GetAttributes() {
			if a.GetKey() == "service.name" {
				service = a.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				o.spans = append(o.spans, s)
				o.names = append(o.names, service)
			}
		}
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	b, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	_, _ = w.Write(b)
}

// TestRunExportsDecisionSpans starts the portal with PORTAL_TRACES=otlp and
// the standard OTEL_* variables pointing at a receiver: a request to the
// sample API arrives there as a sluice.decision span (way in, route, plan)
// with its store span as its child, flushed at shutdown at the latest, on
// the resource OTEL_SERVICE_NAME names.
func TestRunExportsDecisionSpans(t *testing.T) {
	recv := &otlpReceiver{}
	srv := httptest.NewServer(recv)
	t.Cleanup(srv.Close)
	// The SDK reads its settings from the process environment.
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_SERVICE_NAME", "portal-under-test")
	env := baseEnv(t)
	env["DATABASE_URL"] = testenv.PostgresURL(t)
	env["PORTAL_TRACES"] = "otlp"
	p := startPortal(t, env)
	if status, body := get(t, p.url+"/api/items/1"); status != http.StatusOK {
		t.Fatalf("GET /api/items/1: status %d body %q", status, body)
	}
	if err := p.stop(t); err != nil {
		t.Fatalf("run: %v", err)
	}

	recv.mu.Lock()
	defer recv.mu.Unlock()
	var decision, store *tracepb.Span
	for i, s := range recv.spans {
		if recv.names[i] != "portal-under-test" {
			t.Errorf("span %s of service %q, want OTEL_SERVICE_NAME's", s.GetName(), recv.names[i])
		}
		switch s.GetName() {
		case "sluice.decision":
			decision = s
		case "sluice.store":
			store = s
		}
	}
	if decision == nil || store == nil {
		t.Fatalf("no decision span with a store span among %d exported", len(recv.spans))
	}
	if string(store.GetParentSpanId()) != string(decision.GetSpanId()) {
		t.Error("the store span is not the decision span's child")
	}
	attrs := map[string]string{}
	for _, a := range decision.GetAttributes() {
		attrs[a.GetKey()] = a.GetValue().String()
	}
	for key, want := range map[string]string{"sluice.way_in": "middleware", "sluice.route": "GET /api/items/{id}", "sluice.plan": "anonymous"} {
		if !strings.Contains(attrs[key], `"`+want+`"`) {
			t.Errorf("decision span %s = %s, want %q (all: %v)", key, attrs[key], want, attrs)
		}
	}
}

func TestTracingSettings(t *testing.T) {
	for _, tt := range []struct {
		name string
		env  map[string]string
		want bool
	}{
		{"OffByDefault", nil, false},
		{"On", map[string]string{"PORTAL_TRACES": "otlp"}, true},
		{"FollowsOTELTracesExporter", map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true},
		{"OtherOTELExporterIsOff", map[string]string{"OTEL_TRACES_EXPORTER": "console"}, false},
		{"PortalSettingWins", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "PORTAL_TRACES": "off"}, false},
		{"SDKDisabled", map[string]string{"PORTAL_TRACES": "otlp", "OTEL_SDK_DISABLED": "true"}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, _, err := LoadConfig(nil, envOf(tt.env), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Tracing.OTLP != tt.want {
				t.Errorf("traces on = %v, want %v", cfg.Tracing.OTLP, tt.want)
			}
		})
	}
	t.Run("ErrValue", func(t *testing.T) {
		_, _, err := LoadConfig(nil, envOf(map[string]string{"PORTAL_TRACES": "jaeger"}), io.Discard)
		if err == nil || !strings.Contains(err.Error(), "invalid PORTAL_TRACES (-traces)") {
			t.Errorf("error = %v, want one naming PORTAL_TRACES", err)
		}
	})
}
