package docs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"

	"github.com/sluicehq/sluice/internal/docs"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/httplimit"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/sampleapi"
)

// tightResolver gives two keys a limit of three requests a minute per route:
// "tight-reject" is refused past it (429), "tight-degrade" gets search's
// reduced answer. Anonymous callers get the reject limits.
type tightResolver struct{}

func tightLimits(mode enforce.Mode) []enforce.Limit {
	var out []enforce.Limit
	for _, r := range []string{sampleapi.RouteSearch, sampleapi.RouteItem, sampleapi.RouteCreateReport, sampleapi.RouteJob} {
		m := enforce.ModeReject
		if r == sampleapi.RouteSearch {
			m = mode
		}
		out = append(out, enforce.Limit{Name: "t-" + strconv.Itoa(len(out)), Algorithm: enforce.FixedWindow, Limit: 3, Window: time.Hour, Mode: m, Route: r})
	}
	return out
}

func (tightResolver) ResolveKey(secret string) (enforce.Caller, error) {
	switch secret {
	case "tight-reject":
		return enforce.Caller{Subject: "dev:1", Key: "key:1", KeyID: 1, UserID: 1, Plan: "t", Limits: tightLimits(enforce.ModeReject)}, nil
	case "tight-degrade":
		return enforce.Caller{Subject: "dev:2", Key: "key:2", KeyID: 2, UserID: 2, Plan: "t", Limits: tightLimits(enforce.ModeDegrade)}, nil
	}
	return enforce.Caller{}, fmt.Errorf("tight resolver: %w", enforce.ErrInvalidKey)
}

func (tightResolver) Anonymous(ip netip.Addr) enforce.Caller {
	return enforce.Caller{Subject: "ip:" + ip.String(), Plan: "t", Limits: tightLimits(enforce.ModeReject)}
}

// downStore is a rate-limit store whose backend is unreachable.
type downStore struct{}

func (downStore) Allow(context.Context, enforce.Request) (enforce.Decision, error) {
	return enforce.Decision{}, fmt.Errorf("down: %w", enforce.ErrStoreUnavailable)
}

func (downStore) Peek(context.Context, enforce.Request) (enforce.Decision, error) {
	return enforce.Decision{}, fmt.Errorf("down: %w", enforce.ErrStoreUnavailable)
}

// TestEveryDocumentedOperationAnswersOnlyWhatItDocuments walks the generated
// OpenAPI document: for each operation it sends the requests a client can
// send (valid, malformed, unknown, with a bad key, over the limit, while the
// store is down) and checks every answer's status, content type and body
// against the document, and that every status the document lists is one
// the operation really gives. An operation added to the document without
// cases here fails the test.
func TestEveryDocumentedOperationAnswersOnlyWhatItDocuments(t *testing.T) {
	const base = "https://api.example.com"
	m, err := docs.Build(testPlans(), docs.Options{BaseURL: base})
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
	model, buildErrs := doc.BuildV3Model()
	if buildErrs != nil {
		t.Fatalf("build model: %v", buildErrs)
	}

	up := sampleapi.New(httplimit.NewMiddleware(memstore.New(memstore.Options{}), tightResolver{}, httplimit.Options{}),
		sampleapi.Options{JobDuration: time.Millisecond})
	down := sampleapi.New(httplimit.NewMiddleware(downStore{}, tightResolver{}, httplimit.Options{FailureMode: enforce.FailClosed}),
		sampleapi.Options{})

	send := func(api http.Handler, method, path, key, body string) *http.Response {
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req := httptest.NewRequest(method, base+path, rd)
		req.RemoteAddr = "203.0.113.9:1234"
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		w := httptest.NewRecorder()
		api.ServeHTTP(w, req)
		return w.Result()
	}
	// A job to look up: started by the rejecting key (its first of two).
	started := send(up, "POST", "/api/reports", "tight-reject", `{"query":"lamp"}`)
	var job struct {
		StatusURL string `json:"status_url"`
	}
	if err := json.NewDecoder(started.Body).Decode(&job); err != nil || started.StatusCode != http.StatusAccepted {
		t.Fatalf("start a report: status %d, %v", started.StatusCode, err)
	}

	type call struct {
		api             http.Handler
		path, key, body string
		// times sends the call that many times (to pass a limit); the last
		// answer must have status want.
		times, want int
	}
	repeat := func(c call, n int) call { c.times = n; return c }
	cases := map[string][]call{
		"getItem": {
			{api: up, path: "/api/items/1", key: "tight-degrade", want: 200},
			{api: up, path: "/api/items/abc", key: "tight-degrade", want: 400},
			{api: up, path: "/api/items/100000", key: "tight-degrade", want: 404},
			{api: up, path: "/api/items/1", key: "sk_not_a_key", want: 401},
			repeat(call{api: up, path: "/api/items/2", key: "tight-reject", want: 429}, 4),
			{api: down, path: "/api/items/1", key: "tight-reject", want: 503},
		},
		"searchItems": {
			{api: up, path: "/api/search?q=lamp", key: "tight-reject", want: 200},
			{api: up, path: "/api/search", key: "tight-reject", want: 400},
			{api: up, path: "/api/search?q=lamp", key: "sk_not_a_key", want: 401},
			repeat(call{api: up, path: "/api/search?q=oak", key: "tight-degrade", want: 200}, 4), // degraded, not refused
			repeat(call{api: up, path: "/api/search?q=oak", key: "tight-reject", want: 429}, 2),
			{api: down, path: "/api/search?q=lamp", key: "tight-reject", want: 503},
		},
		"createReport": {
			{api: up, path: "/api/reports", key: "tight-degrade", body: `{"query":"lamp"}`, want: 202},
			{api: up, path: "/api/reports", key: "tight-degrade", body: `{"query":`, want: 400},
			{api: up, path: "/api/reports", key: "sk_not_a_key", body: `{}`, want: 401},
			repeat(call{api: up, path: "/api/reports", key: "tight-reject", body: `{}`, want: 429}, 3),
			{api: down, path: "/api/reports", key: "tight-reject", body: `{}`, want: 503},
		},
		"getJob": {
			{api: up, path: job.StatusURL, key: "tight-reject", want: 200},
			{api: up, path: "/api/jobs/r_nope", key: "tight-reject", want: 404},
			{api: up, path: job.StatusURL, key: "sk_not_a_key", want: 401},
			repeat(call{api: up, path: job.StatusURL, key: "tight-reject", want: 429}, 2),
			{api: down, path: job.StatusURL, key: "tight-reject", want: 503},
		},
		"getRateLimitStatus": {
			{api: up, path: "/api/rate-limit-status", key: "tight-reject", want: 200},
			{api: up, path: "/api/rate-limit-status", want: 200},
			{api: up, path: "/api/rate-limit-status", key: "sk_not_a_key", want: 401},
			{api: down, path: "/api/rate-limit-status", key: "tight-reject", want: 503},
		},
	}

	walked := map[string]bool{}
	for path, item := range model.Model.Paths.PathItems.FromOldest() {
		for method, op := range item.GetOperations().FromOldest() {
			method = strings.ToUpper(method)
			id := op.OperationId
			walked[id] = true
			calls, ok := cases[id]
			if !ok {
				t.Errorf("%s %s (%s) is documented but this test sends it nothing: add its cases", method, path, id)
				continue
			}
			var documented []string
			for code := range op.Responses.Codes.KeysFromOldest() {
				documented = append(documented, code)
			}
			seen := map[string]bool{}
			for _, c := range calls {
				var res *http.Response
				for range max(c.times, 1) {
					res = send(c.api, method, c.path, c.key, c.body)
				}
				body, _ := io.ReadAll(res.Body)
				code := strconv.Itoa(res.StatusCode)
				seen[code] = true
				if res.StatusCode != c.want {
					t.Errorf("%s %s (key %q): status %d, want %d: %s", method, c.path, c.key, res.StatusCode, c.want, body)
				}
				if !slices.Contains(documented, code) {
					t.Errorf("%s %s answers %d, which the document does not list (%v)", method, c.path, res.StatusCode, documented)
				}
				res.Body = io.NopCloser(bytes.NewReader(body))
				var rd io.Reader
				if c.body != "" {
					rd = strings.NewReader(c.body)
				}
				req := httptest.NewRequest(method, base+c.path, rd)
				if c.body != "" {
					req.Header.Set("Content-Type", "application/json")
				}
				if ok, verrs := v.ValidateHttpResponse(req, res); !ok {
					for _, e := range verrs {
						t.Errorf("%s %s -> %d (%s) does not match the document: %s: %s", method, c.path, res.StatusCode,
							res.Header.Get("Content-Type"), e.Message, e.Reason)
					}
				}
			}
			for _, code := range documented {
				if !seen[code] {
					t.Errorf("%s %s documents %s, which no request here produced", method, path, code)
				}
			}
		}
	}
	for id := range cases {
		if !walked[id] {
			t.Errorf("cases for %s, which the document does not have", id)
		}
	}
}
