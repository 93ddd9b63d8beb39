package guard_test

import (
	"context"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluicehq/sluice/guard"
)

// TestGuardDecisionsLabelledWayInGuard: with Options.Registerer and
// Options.Tracer, a guard's decisions are counted and traced as the
// portal's own, under way_in "guard".
func TestGuardDecisionsLabelledWayInGuard(t *testing.T) {
	p := newPortal(t)
	reg := prometheus.NewRegistry()
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	g, err := guard.New(context.Background(), guard.Options{PortalURL: p.url, Token: p.token, Registerer: reg, Tracer: tp.Tracer("test")})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	mux := http.NewServeMux()
	mux.Handle("GET /items/{id}", g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	for range 4 { // the plan's 3 an hour, then a 429
		r := httptest.NewRequest("GET", "/items/1", nil)
		r.Header.Set("X-API-Key", p.secret)
		mux.ServeHTTP(httptest.NewRecorder(), r)
	}
	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sluice_enforce_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			got[strings.Join(labels, ",")] = m.GetCounter().GetValue()
		}
	}
	want := map[string]float64{
		"outcome=admitted,plan=basic,route=GET /items/{id},way_in=guard": 3,
		"outcome=rejected,plan=basic,route=GET /items/{id},way_in=guard": 1,
	}
	if !maps.Equal(got, want) {
		t.Errorf("sluice_enforce_requests_total = %v, want %v", got, want)
	}
	decisions := 0
	for _, sp := range spans.GetSpans() {
		if sp.Name != "sluice.decision" {
			continue
		}
		decisions++
		for _, a := range sp.Attributes {
			if a.Key == "sluice.way_in" && a.Value.AsString() != "guard" {
				t.Errorf("a guard's span has way_in %q", a.Value.AsString())
			}
			if strings.Contains(a.Value.Emit(), p.secret) {
				t.Errorf("span attribute %s holds the key", a.Key)
			}
		}
	}
	if decisions != 4 {
		t.Errorf("%d decision spans for 4 requests", decisions)
	}
}
