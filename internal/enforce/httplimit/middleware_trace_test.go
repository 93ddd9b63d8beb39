package httplimit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/httplimit"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
)

// TestDecisionSpans traces one key's requests through three ways in (the
// embedded middleware, a check, Envoy's Check) with the SDK's in-memory
// exporter: each decision is a span naming its way in, route, plan and key
// id, with an event per layer and the store's span as its child; no
// attribute holds the key.
func TestDecisionSpans(t *testing.T) {
	const secret = "sk_live_trace_me_not"
	limits := []enforce.Limit{
		{Name: "pro-items", Route: routeItems, Algorithm: enforce.FixedWindow, Limit: 2, Window: time.Hour},
		{Name: "pro-all", Algorithm: enforce.FixedWindow, Limit: 100, Window: time.Hour},
	}
	res := &mwResolver{Keys: map[string]enforce.Caller{secret: {Subject: "dev:7", Key: "key:42", KeyID: 42, UserID: 7, Plan: "pro", Limits: limits}}}
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	mw := httplimit.NewMiddleware(memstore.New(memstore.Options{}), res, httplimit.Options{Tracer: tp.Tracer("sluice")})
	mux := http.NewServeMux()
	mux.Handle(routeItems, mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))

	r := httptest.NewRequest("GET", "/api/items/1", nil)
	r.Header.Set("Authorization", "Bearer "+secret)
	mux.ServeHTTP(httptest.NewRecorder(), r)
	r = httptest.NewRequest("GET", "/v1/check", nil)
	r.Header.Set("X-API-Key", secret)
	mw.WayIn(httplimit.WayInCheck).Enforce(httptest.NewRecorder(), r, routeItems, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	if v := mw.WayIn(httplimit.WayInEnvoy).Check(context.Background(), httplimit.Credentials{APIKey: secret}, routeItems, 1); v.Status != http.StatusTooManyRequests {
		t.Fatalf("third request: status %d, want 429", v.Status)
	}

	spans := exp.GetSpans()
	var decisions []tracetest.SpanStub
	stores := map[string]tracetest.SpanStub{} // by parent span id
	for _, s := range spans {
		switch s.Name {
		case httplimit.SpanDecision:
			decisions = append(decisions, s)
		case httplimit.SpanStore:
			stores[s.Parent.SpanID().String()] = s
		default:
			t.Errorf("unexpected span %q", s.Name)
		}
		for _, a := range s.Attributes {
			if strings.Contains(a.Value.Emit(), secret) {
				t.Errorf("span %s attribute %s holds the key", s.Name, a.Key)
			}
		}
		for _, e := range s.Events {
			for _, a := range e.Attributes {
				if strings.Contains(a.Value.Emit(), secret) {
					t.Errorf("span %s event %s attribute %s holds the key", s.Name, e.Name, a.Key)
				}
			}
		}
	}
	if len(decisions) != 3 || len(stores) != 3 {
		t.Fatalf("%d decision spans and %d store spans under them, want 3 and 3: %v", len(decisions), len(stores), spans)
	}
	for i, want := range []struct {
		wayIn     string
		allowed   bool
		remaining int64 // of pro-items
	}{{"middleware", true, 1}, {"check", true, 0}, {"envoy", false, 0}} {
		s := decisions[i]
		got := map[attribute.Key]string{}
		for _, a := range s.Attributes {
			got[a.Key] = a.Value.Emit()
		}
		wantAttrs := map[attribute.Key]string{
			httplimit.AttrWayIn: want.wayIn, httplimit.AttrRoute: routeItems, httplimit.AttrPlan: "pro",
			httplimit.AttrKeyID: "42", httplimit.AttrDeveloperID: "7", httplimit.AttrAllowed: fmt.Sprint(want.allowed),
			httplimit.AttrLayers: "2",
		}
		for k, v := range wantAttrs {
			if got[k] != v {
				t.Errorf("%s span: %s = %q, want %q (all: %v)", want.wayIn, k, got[k], v, got)
			}
		}
		if len(got) != len(wantAttrs) {
			t.Errorf("%s span: attributes %v, want exactly %v", want.wayIn, got, wantAttrs)
		}
		if len(s.Events) != 2 || s.Events[0].Name != httplimit.EventLayer {
			t.Fatalf("%s span: events %v, want one per layer", want.wayIn, s.Events)
		}
		layer := map[attribute.Key]string{}
		for _, a := range s.Events[0].Attributes {
			layer[a.Key] = a.Value.Emit()
		}
		if layer[httplimit.AttrLimit] != "pro-items" || layer[httplimit.AttrRemaining] != fmt.Sprint(want.remaining) || layer[httplimit.AttrAllowed] != fmt.Sprint(want.allowed) {
			t.Errorf("%s span: first layer event %v", want.wayIn, layer)
		}
		store, ok := stores[s.SpanContext.SpanID().String()]
		if !ok || store.SpanContext.TraceID() != s.SpanContext.TraceID() {
			t.Errorf("%s span has no store span as its child", want.wayIn)
		}
	}
}
