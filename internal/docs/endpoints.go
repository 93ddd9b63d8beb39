package docs

import (
	"strings"

	"github.com/sluicehq/sluice/internal/sampleapi"
)

// Endpoint is one operation of the sample API, as the docs describe it. The
// operations are code, so they are described here; their limits are data and
// come from the plans.
type Endpoint struct {
	// Route is the ServeMux pattern, e.g. "GET /api/items/{id}"; plan limits
	// name it in their Route.
	Route string
	// Method and Path split Route; Path keeps its {wildcards}.
	Method, Path string
	// OperationID names the operation in the OpenAPI document.
	OperationID string
	Summary     string
	Description string
	// ExamplePath is a concrete path to call, with a query if one is needed.
	ExamplePath string
	// ExampleHost is the host the example request is sent to ("" means
	// any): a route whose pattern names a host is only served there.
	ExampleHost string
	// ExampleBody is a JSON request body for the curl example ("" for none).
	ExampleBody string
	// Status is the status of a successful answer (200, or 202 for reports).
	Status int
	// Params are the path and query parameters.
	Params []Param
	// Limited is false for the status endpoint, which spends nothing.
	Limited bool
}

// Param is one path or query parameter.
type Param struct {
	Name, In, Description string
	Required              bool
	// Type is the JSON schema type: "string" or "integer".
	Type string
}

// SampleAPI lists the sample API's operations in the order the docs show
// them.
func SampleAPI() []Endpoint {
	return []Endpoint{
		endpoint(sampleapi.RouteSearch, "searchItems", "Search the catalogue",
			"Full-text search over the catalogue, best matches first. The expensive endpoint: "+
				"its tier is usually the tightest, and in degrade mode an over-limit caller gets a "+
				"cached or reduced answer (marked Sluice-Degraded) instead of a 429.",
			"/api/search?q=lantern", "", 200,
			Param{Name: "q", In: "query", Description: "Words to search for (at most 200 bytes).", Required: true, Type: "string"}),
		endpoint(sampleapi.RouteItem, "getItem", "Get one item",
			"One catalogue item by id. Every id shares this endpoint's tier.",
			"/api/items/42", "", 200,
			Param{Name: "id", In: "path", Description: "The item's id.", Required: true, Type: "integer"}),
		endpoint(sampleapi.RouteCreateReport, "createReport", "Start a report",
			"Starts an asynchronous report and answers 202 with its status URL at once. When the "+
				"reports tier queues (a leaky bucket in queue mode), the job waits its turn instead of "+
				"your connection: starts_at and Sluice-Queue-Delay-Ms say when it will run.",
			"/api/reports", `{"query":"lantern"}`, 202),
		endpoint(sampleapi.RouteJob, "getJob", "Get a report's status",
			"The status of a report you started, and its result once done. The job id is the last "+
				"part of the Location (and status_url) that POST /api/reports answered with: set JOB_ID to it.",
			"/api/jobs/$JOB_ID", "", 200,
			Param{Name: "id", In: "path", Description: "The job id from POST /api/reports.", Required: true, Type: "string"}),
		{
			Route: sampleapi.RouteStatus, Method: "GET", Path: "/api/rate-limit-status",
			OperationID: "getRateLimitStatus", Summary: "Your rate-limit status",
			Description: "Every limit of your plan, plan-wide and per endpoint, with limit, window, " +
				"remaining, and reset, read without spending anything: call it as often as you like " +
				"to decide whether to send now. It also sets the X-RateLimit-* headers for the limit " +
				"closest to running out.",
			ExamplePath: "/api/rate-limit-status", Status: 200,
		},
	}
}

func endpoint(route, id, summary, desc, example, body string, status int, params ...Param) Endpoint {
	method, path, _ := strings.Cut(route, " ")
	return Endpoint{
		Route: route, Method: method, Path: path, OperationID: id, Summary: summary,
		Description: desc, ExamplePath: example, ExampleBody: body, Status: status,
		Params: params, Limited: true,
	}
}

// RouteEndpoints describes a declared service's routes (ServeMux patterns)
// for the docs: the operations are the operator's, so all that is known of
// each is its pattern, its path wildcards and that it is limited. Example
// paths put "1" in each wildcard ("a/b" in a {name...} one).
func RouteEndpoints(patterns []string) []Endpoint {
	out := make([]Endpoint, 0, len(patterns))
	for _, route := range patterns {
		method, rest, _ := strings.Cut(route, " ")
		rest = strings.TrimSpace(rest)
		path := rest
		host := ""
		if i := strings.IndexByte(rest, '/'); i > 0 {
			host, path = rest[:i], rest[i:] // a host in the pattern is not part of the path
		}
		path = strings.ReplaceAll(path, "{$}", "")
		e := Endpoint{Route: route, Method: method, Path: path, Summary: route, Status: 200, Limited: true,
			OperationID: operationID(method, path), ExampleHost: host}
		var example strings.Builder
		for _, seg := range strings.SplitAfter(path, "/") {
			name, isWild := strings.CutPrefix(strings.TrimSuffix(seg, "/"), "{")
			if !isWild {
				example.WriteString(seg)
				continue
			}
			name = strings.TrimSuffix(name, "}")
			value := "1"
			if n, rest := strings.CutSuffix(name, "..."); rest {
				name, value = n, "a/b"
			}
			e.Params = append(e.Params, Param{Name: name, In: "path", Required: true, Type: "string",
				Description: "Path segment " + name + "."})
			example.WriteString(value)
			if strings.HasSuffix(seg, "/") {
				example.WriteString("/")
			}
		}
		e.ExamplePath = example.String()
		e.Path = strings.ReplaceAll(path, "...}", "}")
		out = append(out, e)
	}
	return out
}

// operationID is "get_items_id" for GET /items/{id}.
func operationID(method, path string) string {
	var b strings.Builder
	b.WriteString(strings.ToLower(method))
	for _, r := range path {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		case r >= 'A' && r <= 'Z':
			b.WriteRune(r + ('a' - 'A'))
		case r == '/' || r == '-' || r == '_' || r == '.':
			if !strings.HasSuffix(b.String(), "_") {
				b.WriteByte('_')
			}
		}
	}
	return strings.TrimSuffix(b.String(), "_")
}
