package adminapi

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
)

func TestOpenAPIDocumentIsValidOpenAPI31(t *testing.T) {
	doc, err := libopenapi.NewDocument(openAPIDocument)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	if v := doc.GetVersion(); v != "3.1.0" {
		t.Errorf("openapi version = %q, want 3.1.0", v)
	}
	model, err := doc.BuildV3Model()
	if err != nil {
		t.Fatalf("build model: %v", err)
	}
	if model == nil {
		t.Fatal("no v3 model")
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatalf("validator: %v", errs)
	}
	// Checks the document against the OpenAPI 3.1 meta-schema.
	if ok, verrs := v.ValidateDocument(); !ok {
		for _, e := range verrs {
			t.Errorf("invalid document: %v", e)
		}
	}
}

// documentedOperations lists "METHOD /full/path" for every operation of
// openapi.json, with its operationId and whether it declares no security.
func documentedOperations(t *testing.T) map[string]struct {
	id     string
	public bool
} {
	t.Helper()
	var doc struct {
		Servers []struct{ URL string }                `json:"servers"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(openAPIDocument, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Servers) != 1 || doc.Servers[0].URL != Prefix {
		t.Fatalf("servers = %+v, want one server at %s", doc.Servers, Prefix)
	}
	out := map[string]struct {
		id     string
		public bool
	}{}
	for path, item := range doc.Paths {
		for method, raw := range item {
			if method == "parameters" || method == "summary" || method == "description" {
				continue
			}
			var op struct {
				OperationID string             `json:"operationId"`
				Security    *[]json.RawMessage `json:"security"`
			}
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
			public := op.Security != nil && len(*op.Security) == 0
			out[strings.ToUpper(method)+" "+Prefix+path] = struct {
				id     string
				public bool
			}{op.OperationID, public}
		}
	}
	return out
}

func TestOpenAPIMatchesRoutes(t *testing.T) {
	documented := documentedOperations(t)
	routes := (&api{}).routes()
	served := map[string]bool{}
	for _, rt := range routes {
		key := rt.method + " " + rt.path
		served[key] = true
		doc, ok := documented[key]
		if !ok {
			t.Errorf("route %s is not in openapi.json", key)
			continue
		}
		if doc.id != rt.operationID {
			t.Errorf("%s: operationId %q in openapi.json, %q in routes", key, doc.id, rt.operationID)
		}
		if doc.public != rt.public {
			t.Errorf("%s: public %v in openapi.json, %v in routes", key, doc.public, rt.public)
		}
	}
	for key := range documented {
		if !served[key] {
			t.Errorf("openapi.json documents %s, which no route serves", key)
		}
	}
	if len(routes) != len(documented) {
		t.Errorf("%d routes, %d documented operations", len(routes), len(documented))
	}
}

func TestOpenAPIServedWithoutToken(t *testing.T) {
	e := newEnv(t)
	res := e.do("GET", Prefix+"/openapi.json", "", nil)
	if res.status != http.StatusOK {
		t.Fatalf("status = %d, want 200", res.status)
	}
	if ct := res.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q", ct)
	}
	if !slices.Equal(res.body, openAPIDocument) {
		t.Error("served document differs from the embedded openapi.json")
	}
}
