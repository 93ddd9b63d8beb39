package docs

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// The OpenAPI 3.1 document is built from typed values rather than a template,
// so that it is always well-formed JSON and every field is spelled once.

type oaDoc struct {
	OpenAPI    string                `json:"openapi"`
	Info       oaInfo                `json:"info"`
	Servers    []oaServer            `json:"servers"`
	Security   []map[string][]string `json:"security"`
	Paths      map[string]oaPath     `json:"paths"`
	Components oaComponents          `json:"components"`
	// XRateLimitPlans lists the compared plans, in the docs' order.
	XRateLimitPlans []oaPlan `json:"x-ratelimit-plans"`
}

type oaInfo struct {
	Title       string `json:"title"`
	Version     string `json:"version"`
	Description string `json:"description"`
}

type oaServer struct {
	URL string `json:"url"`
}

type oaPlan struct {
	Slug        string `json:"slug"`
	Name        string `json:"name"`
	Default     bool   `json:"default,omitempty"`
	Anonymous   bool   `json:"anonymous,omitempty"`
	Yours       bool   `json:"yours,omitempty"`
	Description string `json:"description,omitempty"`
}

// oaPath holds the operations of one path; the sample API has at most one
// method per path.
type oaPath struct {
	Get  *oaOperation `json:"get,omitempty"`
	Post *oaOperation `json:"post,omitempty"`
}

type oaOperation struct {
	OperationID string                `json:"operationId"`
	Summary     string                `json:"summary"`
	Description string                `json:"description"`
	Parameters  []oaParameter         `json:"parameters,omitempty"`
	RequestBody *oaRequestBody        `json:"requestBody,omitempty"`
	Responses   map[string]oaResponse `json:"responses"`
	// XRateLimit is one entry per compared plan: the limits a call spends.
	XRateLimit []oaRateLimit `json:"x-ratelimit"`
}

type oaRateLimit struct {
	Plan   string        `json:"plan"`
	Limits []oaLimitSpec `json:"limits"`
}

type oaLimitSpec struct {
	Policy    string `json:"policy"`
	Scope     string `json:"scope"` // "endpoint" or "plan"
	Algorithm string `json:"algorithm"`
	Limit     int64  `json:"limit"`
	// WindowSeconds is left out for a quota, which renews by Period at
	// the developer's billing anchor rather than after a fixed window.
	WindowSeconds int64 `json:"window_seconds,omitempty"`
	// Period and Renews are a quota's: "day", "month" or "year", renewing
	// at "billing_anchor".
	Period string `json:"period,omitempty"`
	Renews string `json:"renews,omitempty"`
	Burst  int64  `json:"burst"`
	Cost   int64  `json:"cost"`
	Mode   string `json:"mode"`
	// CountPer is "key" (each API key on its own) or "developer" (all of a
	// developer's keys together).
	CountPer string `json:"count_per"`
	// Precision is exact, leased or local (see the limit's docs for what
	// leased and local mean for the headers, and their bound).
	Precision string `json:"precision"`
	// CountWhen is "success" or "error" for a limit counting only those
	// responses (left out: every response); CostHeader a response header
	// whose whole-number value is the request's cost.
	CountWhen  string `json:"count_when,omitempty"`
	CostHeader string `json:"cost_header,omitempty"`
}

type oaParameter struct {
	Name        string   `json:"name"`
	In          string   `json:"in"`
	Description string   `json:"description"`
	Required    bool     `json:"required"`
	Schema      oaSchema `json:"schema"`
}

type oaRequestBody struct {
	Required bool                   `json:"required"`
	Content  map[string]oaMediaType `json:"content"`
}

type oaMediaType struct {
	Schema  oaSchema `json:"schema"`
	Example any      `json:"example,omitempty"`
}

type oaResponse struct {
	Ref         string                 `json:"$ref,omitempty"`
	Description string                 `json:"description,omitempty"`
	Headers     map[string]oaRef       `json:"headers,omitempty"`
	Content     map[string]oaMediaType `json:"content,omitempty"`
}

type oaRef struct {
	Ref string `json:"$ref"`
}

type oaSchema struct {
	Ref         string              `json:"$ref,omitempty"`
	Type        string              `json:"type,omitempty"`
	Format      string              `json:"format,omitempty"`
	Description string              `json:"description,omitempty"`
	Properties  map[string]oaSchema `json:"properties,omitempty"`
	Required    []string            `json:"required,omitempty"`
	Items       *oaSchema           `json:"items,omitempty"`
	Enum        []string            `json:"enum,omitempty"`
	Minimum     *int64              `json:"minimum,omitempty"`
}

type oaHeader struct {
	Description string   `json:"description"`
	Schema      oaSchema `json:"schema"`
}

type oaSecurityScheme struct {
	Type        string `json:"type"`
	Scheme      string `json:"scheme,omitempty"`
	In          string `json:"in,omitempty"`
	Name        string `json:"name,omitempty"`
	Description string `json:"description"`
}

type oaComponents struct {
	Schemas         map[string]oaSchema         `json:"schemas"`
	Headers         map[string]oaHeader         `json:"headers"`
	Responses       map[string]oaResponse       `json:"responses"`
	SecuritySchemes map[string]oaSecurityScheme `json:"securitySchemes"`
}

// rateLimitHeaders are on every limited response.
var rateLimitHeaders = []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit-Policy", "RateLimit"}

// OpenAPI renders m as an OpenAPI 3.1 document of the sample API: every
// operation carries an x-ratelimit extension listing, per compared plan, the
// limits a call spends, and documents its 429 response and rate-limit
// headers. The top-level x-ratelimit-plans lists the plans.
func OpenAPI(m Model) ([]byte, error) {
	doc := oaDoc{
		OpenAPI: "3.1.0",
		Info: oaInfo{Title: m.Title, Version: "1.0.0", Description: "The API Sluice protects. " +
			"Rate limits per plan are in each operation's x-ratelimit extension, generated from the plans " +
			"Sluice enforces. " + Backoff},
		Servers:    []oaServer{{URL: m.BaseURL}},
		Security:   []map[string][]string{{"bearerKey": {}}, {"headerKey": {}}, {}},
		Paths:      map[string]oaPath{},
		Components: components(),
	}
	for _, p := range m.Plans {
		doc.XRateLimitPlans = append(doc.XRateLimitPlans, oaPlan{Slug: p.Slug, Name: p.Name,
			Default: p.IsDefault, Anonymous: p.IsAnonymous, Yours: p.Yours, Description: p.Description})
	}
	for _, e := range m.Endpoints {
		op := operation(e)
		path := doc.Paths[e.Path]
		switch e.Method {
		case "GET":
			path.Get = op
		case "POST":
			path.Post = op
		default:
			return nil, fmt.Errorf("docs: openapi: method %s of %s not supported", e.Method, e.Route)
		}
		doc.Paths[e.Path] = path
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("docs: openapi: %w", err)
	}
	return out, nil
}

func operation(e EndpointDoc) *oaOperation {
	op := &oaOperation{
		OperationID: e.OperationID, Summary: e.Summary, Description: e.Description,
		Responses:  map[string]oaResponse{},
		XRateLimit: []oaRateLimit{},
	}
	for _, p := range e.Params {
		op.Parameters = append(op.Parameters, oaParameter{Name: p.Name, In: p.In, Description: p.Description,
			Required: p.Required, Schema: oaSchema{Type: p.Type}})
	}
	if e.ExampleBody != "" {
		var example any
		_ = json.Unmarshal([]byte(e.ExampleBody), &example) // our own constant, valid JSON
		op.RequestBody = &oaRequestBody{Content: map[string]oaMediaType{"application/json": {
			Schema: oaSchema{Ref: "#/components/schemas/ReportRequest"}, Example: example}}}
	}
	headers := map[string]oaRef{}
	for _, h := range rateLimitHeaders {
		headers[h] = oaRef{Ref: "#/components/headers/" + h}
	}
	ok := oaResponse{Description: "Success.", Headers: headers,
		Content: map[string]oaMediaType{"application/json": {Schema: oaSchema{Ref: "#/components/schemas/" + successSchema(e.Route)}}}}
	if e.Limited {
		ok.Headers[headerDegraded] = oaRef{Ref: "#/components/headers/" + headerDegraded}
		ok.Headers[headerQueueDelay] = oaRef{Ref: "#/components/headers/" + headerQueueDelay}
		op.Responses["429"] = oaResponse{Ref: "#/components/responses/TooManyRequests"}
	}
	op.Responses[strconv.Itoa(e.Status)] = ok
	op.Responses["401"] = oaResponse{Ref: "#/components/responses/InvalidKey"}
	op.Responses["503"] = oaResponse{Ref: "#/components/responses/Unavailable"}
	// An id that names nothing answers 404: a job, and an item past the
	// catalogue.
	if strings.HasSuffix(e.Route, "/jobs/{id}") || strings.HasSuffix(e.Route, "/items/{id}") {
		op.Responses["404"] = oaResponse{Ref: "#/components/responses/NotFound"}
	}
	// 400 only where a request can be malformed: a body, a required query,
	// an integer in the path; a string wildcard (a job id) that names
	// nothing is a 404.
	if e.ExampleBody != "" || slices.ContainsFunc(e.Params, func(p Param) bool {
		return p.In == "query" && p.Required || p.Type == "integer"
	}) {
		op.Responses["400"] = oaResponse{Ref: "#/components/responses/BadRequest"}
	}
	for _, p := range e.Plans {
		rl := oaRateLimit{Plan: p.Plan, Limits: []oaLimitSpec{}}
		for _, l := range p.Limits {
			scope := "endpoint"
			if l.Route == "" {
				scope = "plan"
			}
			spec := oaLimitSpec{Policy: l.Policy, Scope: scope, Algorithm: string(l.Algorithm),
				Limit: l.Limit, WindowSeconds: int64(l.Window.Seconds()), Burst: l.Burst, Cost: l.Cost, Mode: string(l.Mode),
				CountPer: l.CountPer, Precision: string(l.Precision), CountWhen: l.CountWhen, CostHeader: l.CostHeader}
			if l.Period != "" {
				spec.WindowSeconds, spec.Period, spec.Renews = 0, string(l.Period), "billing_anchor"
			}
			rl.Limits = append(rl.Limits, spec)
		}
		op.XRateLimit = append(op.XRateLimit, rl)
	}
	return op
}

const (
	headerDegraded   = "Sluice-Degraded"
	headerQueueDelay = "Sluice-Queue-Delay-Ms"
)

func successSchema(route string) string {
	switch {
	case strings.HasSuffix(route, "/search"):
		return "SearchResult"
	case strings.HasSuffix(route, "/items/{id}"):
		return "Item"
	case strings.HasSuffix(route, "/rate-limit-status"):
		return "RateLimitStatus"
	}
	return "Job"
}

func components() oaComponents {
	str := oaSchema{Type: "string"}
	integer := oaSchema{Type: "integer"}
	boolean := oaSchema{Type: "boolean"}
	dateTime := oaSchema{Type: "string", Format: "date-time"}
	one := int64(1)
	obj := func(required []string, props map[string]oaSchema) oaSchema {
		return oaSchema{Type: "object", Required: required, Properties: props}
	}
	ref := func(name string) oaSchema { return oaSchema{Ref: "#/components/schemas/" + name} }
	errorContent := func(schema string) map[string]oaMediaType {
		return map[string]oaMediaType{"application/json": {Schema: ref(schema)}}
	}
	return oaComponents{
		Schemas: map[string]oaSchema{
			"Item": obj([]string{"id", "name", "description", "price_cents"}, map[string]oaSchema{
				"id": integer, "name": str, "description": str, "price_cents": integer}),
			"SearchResult": obj([]string{"query", "total", "items", "degraded", "cached", "reduced"}, map[string]oaSchema{
				"query": str, "total": integer, "items": {Type: "array", Items: &oaSchema{Ref: "#/components/schemas/Item"}},
				"degraded": {Type: "boolean", Description: "True when you are over a degrade-mode limit and got a cached or reduced answer."},
				"cached":   boolean, "reduced": boolean}),
			"ReportRequest": obj(nil, map[string]oaSchema{
				"query": {Type: "string", Description: "Selects the items the report covers; empty covers all."}}),
			"Job": obj([]string{"id", "status", "status_url", "query", "created_at", "starts_at"}, map[string]oaSchema{
				"id": str, "status": {Type: "string", Enum: []string{"queued", "running", "done"}},
				"status_url": str, "query": str, "created_at": dateTime,
				"starts_at": {Type: "string", Format: "date-time", Description: "When the job leaves the queue and runs."},
				"result":    obj([]string{"items", "average_price_cents"}, map[string]oaSchema{"items": integer, "average_price_cents": integer})}),
			"RateLimitStatus": obj([]string{"plan", "limits"}, map[string]oaSchema{
				"plan": str,
				"limits": {Type: "array", Items: &oaSchema{Type: "object",
					Required: []string{"policy", "route", "algorithm", "mode", "limit", "window_seconds", "burst", "cost", "remaining", "reset", "reset_after_seconds"},
					Properties: map[string]oaSchema{
						"policy": str, "route": {Type: "string", Description: "The endpoint pattern; empty for a plan-wide limit."},
						"algorithm": str, "mode": str, "limit": integer, "window_seconds": integer, "burst": integer, "cost": integer,
						"remaining": integer, "reset": {Type: "integer", Description: "Unix seconds when the limit is fully available again."},
						"reset_after_seconds": integer}}}}),
			"RateLimitExceeded": obj([]string{"error", "message", "retry_after", "limit", "policy"}, map[string]oaSchema{
				"error":       {Type: "string", Enum: []string{"rate_limit_exceeded"}},
				"message":     str,
				"retry_after": {Type: "integer", Minimum: &one, Description: "Seconds to wait, as in Retry-After."},
				"limit":       integer, "policy": {Type: "string", Description: "The limit you ran into, as in RateLimit-Policy."}}),
			"Error": obj([]string{"error", "message"}, map[string]oaSchema{"error": str, "message": str}),
		},
		Headers: map[string]oaHeader{
			"X-RateLimit-Limit":     {Description: "The limit of the layer you will run into first.", Schema: integer},
			"X-RateLimit-Remaining": {Description: "What is left of it.", Schema: integer},
			"X-RateLimit-Reset":     {Description: "Unix seconds when it is fully available again.", Schema: integer},
			"RateLimit-Policy":      {Description: `Every limit of the request: "name";q=quota;w=window-seconds, or "name";q=slots;qu="concurrent-requests" for a limit on requests in flight (draft-ietf-httpapi-ratelimit-headers).`, Schema: str},
			"RateLimit":             {Description: `Every limit's state: "name";r=remaining;t=seconds-to-reset.`, Schema: str},
			"Retry-After":           {Description: "Whole seconds to wait before retrying, at least 1.", Schema: oaSchema{Type: "integer", Minimum: &one}},
			headerDegraded:          {Description: "Set when the answer is cached or reduced because you passed a degrade-mode limit: the policy's name.", Schema: str},
			headerQueueDelay:        {Description: "Milliseconds the request (or job) waited its turn in a queue-mode limit.", Schema: integer},
		},
		Responses: map[string]oaResponse{
			"TooManyRequests": {Description: "Over a limit. " + Backoff, Headers: map[string]oaRef{
				"Retry-After": {Ref: "#/components/headers/Retry-After"}, "X-RateLimit-Limit": {Ref: "#/components/headers/X-RateLimit-Limit"},
				"X-RateLimit-Remaining": {Ref: "#/components/headers/X-RateLimit-Remaining"}, "X-RateLimit-Reset": {Ref: "#/components/headers/X-RateLimit-Reset"},
				"RateLimit-Policy": {Ref: "#/components/headers/RateLimit-Policy"}, "RateLimit": {Ref: "#/components/headers/RateLimit"}},
				Content: errorContent("RateLimitExceeded")},
			"InvalidKey":  {Description: "The key is malformed, unknown, revoked or expired (never downgraded to anonymous).", Content: errorContent("Error")},
			"Unavailable": {Description: "Rate limiting is unavailable and the service fails closed; retry after Retry-After.", Content: errorContent("Error")},
			"NotFound":    {Description: "No such job of yours.", Content: errorContent("Error")},
			"BadRequest":  {Description: "A parameter or the body is invalid; the message names it.", Content: errorContent("Error")},
		},
		SecuritySchemes: map[string]oaSecurityScheme{
			"bearerKey": {Type: "http", Scheme: "bearer", Description: "Your API key: Authorization: Bearer <key>. A plan's plan-wide limits are shared by all your keys; its endpoint tiers count per key, unless a limit's count_per in x-ratelimit says otherwise. Without a key you get the anonymous plan, limited per IPv4 address or IPv6 /64."},
			"headerKey": {Type: "apiKey", In: "header", Name: "X-API-Key", Description: "Your API key, alternatively."},
		},
	}
}
