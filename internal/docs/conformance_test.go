package docs_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"

	"github.com/sluicehq/sluice/internal/docs"
	"github.com/sluicehq/sluice/internal/enforce/httplimit"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/sampleapi"
)

// TestSampleAPIAnswersOnlyWhatItsDocumentSays: every answer of the sample
// API, errors included, is one the generated OpenAPI document describes, so
// a generated client (oapi-codegen, say) meets no undocumented status.
func TestSampleAPIAnswersOnlyWhatItsDocumentSays(t *testing.T) {
	const base = "https://api.example.com"
	m, err := docs.Build(testPlans(), docs.Options{BaseURL: base, YourPlan: "free"})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := docs.OpenAPI(m)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := libopenapi.NewDocument(raw)
	if err != nil {
		t.Fatal(err)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatalf("validator: %v", errs)
	}
	store := memstore.New(memstore.Options{})
	mw := httplimit.NewMiddleware(store, sampleapi.NewDemoResolver(), httplimit.Options{})
	api := sampleapi.New(mw, sampleapi.Options{})

	for _, tt := range []struct {
		name, path string
		want       int
	}{
		{"an item", "/api/items/1", http.StatusOK},
		{"an id past the catalogue", "/api/items/100000", http.StatusNotFound},
		{"an id that is not a number", "/api/items/abc", http.StatusBadRequest},
		{"a search", "/api/search?q=lamp", http.StatusOK},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, base+tt.path, nil)
			req.RemoteAddr = "203.0.113.7:1234"
			req.Header.Set("Authorization", "Bearer "+sampleapi.DemoProKey)
			w := httptest.NewRecorder()
			api.ServeHTTP(w, req)
			res := w.Result()
			body, _ := io.ReadAll(res.Body)
			if res.StatusCode != tt.want {
				t.Fatalf("status %d, want %d: %s", res.StatusCode, tt.want, body)
			}
			res.Body = io.NopCloser(bytes.NewReader(body))
			if ok, verrs := v.ValidateHttpResponse(httptest.NewRequest(http.MethodGet, base+tt.path, nil), res); !ok {
				for _, e := range verrs {
					t.Errorf("%s -> %d is not in the document: %s: %s", tt.path, res.StatusCode, e.Message, e.Reason)
				}
			}
		})
	}
}
