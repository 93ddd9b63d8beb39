package adminapi

import (
	"encoding/json"
	"net/http"
)

// Problem is an RFC 9457 problem details object, the body of every error
// response of the admin API (Content-Type application/problem+json).
type Problem struct {
	// Type is a URI naming the kind of problem; clients branch on it.
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// Instance is the request id, to quote when reporting a problem.
	Instance string `json:"instance,omitempty"`
	// Errors lists every invalid field of a request at once.
	Errors []FieldError `json:"errors,omitempty"`
}

// FieldError names one invalid request field as a JSON path
// ("limits[2].window_seconds") and says what it must be.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// Problem types. They are URNs rather than URLs because Sluice is self-hosted
// and has no canonical site to dereference; the OpenAPI document lists them.
const (
	typeValidation         = "urn:sluice:problem:validation"
	typeMalformed          = "urn:sluice:problem:malformed-request"
	typeTooLarge           = "urn:sluice:problem:request-too-large"
	typeUnsupportedMedia   = "urn:sluice:problem:unsupported-media-type"
	typeUnauthorized       = "urn:sluice:problem:unauthorized"
	typeNotFound           = "urn:sluice:problem:not-found"
	typeConflict           = "urn:sluice:problem:conflict"
	typeStaleVersion       = "urn:sluice:problem:stale-version"
	typeInUse              = "urn:sluice:problem:in-use"
	typeInternal           = "urn:sluice:problem:internal"
	typeUnavailable        = "urn:sluice:problem:unavailable"
	typeMethodNotAllowed   = "urn:sluice:problem:method-not-allowed"
	problemContentType     = "application/problem+json"
	jsonContentType        = "application/json"
	internalErrorTitle     = "Internal error"
	internalErrorDetailFmt = "The request failed on the server; quote request id %s when reporting it."
)

// writeProblem sends p as the response. The request id becomes the
// problem's instance so a client report can be matched with the log line.
func writeProblem(w http.ResponseWriter, r *http.Request, p Problem) {
	if p.Instance == "" {
		p.Instance = requestID(r.Context())
	}
	w.Header().Set("Content-Type", problemContentType)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(p.Status)
	// An encoding failure here means the client went away; nothing to do.
	_ = json.NewEncoder(w).Encode(p)
}

// writeJSON sends v as a JSON response with the given status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", jsonContentType)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
