package adminapi

import (
	_ "embed"
	"net/http"
)

// openAPIDocument describes every route of routes(); TestOpenAPIMatchesRoutes
// holds the two together and the handler tests validate real responses
// against it.
//
//go:embed openapi.json
var openAPIDocument []byte

// openAPI serves the OpenAPI 3.1 document. It needs no token, so that
// client generators and API browsers can fetch it.
func (a *api) openAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=300")
	_, _ = w.Write(openAPIDocument)
}
