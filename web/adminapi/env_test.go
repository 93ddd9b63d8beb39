package adminapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/optokens"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/users"
)

// testRoutes are the protected API's route patterns tiers may name, as the
// sample API serves them.
var testRoutes = []string{"GET /api/search", "GET /api/items/{id}", "POST /api/reports"}

const testBootstrap = "bootstrap-admin-token-for-tests-0123456789"

// env is one admin API on its own database, with a validator that holds
// every response to openapi.json.
type env struct {
	t      *testing.T
	pool   *pgxpool.Pool
	srv    *httptest.Server
	plans  *plans.Service
	keys   *apikeys.Service
	tokens *optokens.Store
	store  *memstore.Store
	logs   *syncBuffer

	vmu sync.Mutex
	v   validator.Validator
}

// syncBuffer collects log output from the server's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func newEnv(t *testing.T) *env {
	t.Helper()
	pool := testenv.Postgres(t)
	logs := &syncBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e := &env{
		t:      t,
		pool:   pool,
		plans:  plans.NewService(pool, testRoutes, logger).WithReducedAnswers([]string{"GET /api/search"}),
		keys:   apikeys.NewService(pool, testRoutes, logger),
		tokens: optokens.NewStore(pool, testBootstrap),
		store:  memstore.New(memstore.Options{}),
		logs:   logs,
		v:      openAPIValidator(t),
	}
	e.srv = httptest.NewServer(New(Deps{
		Plans: e.plans, Keys: e.keys, Tokens: e.tokens, Store: e.store, Pool: pool, Logger: logger,
	}))
	t.Cleanup(e.srv.Close)
	return e
}

func openAPIValidator(t *testing.T) validator.Validator {
	t.Helper()
	doc, err := libopenapi.NewDocument(openAPIDocument)
	if err != nil {
		t.Fatalf("parse openapi.json: %v", err)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatalf("build validator: %v", errs)
	}
	return v
}

// response is what do returns: status, headers and the raw body.
type response struct {
	status int
	header http.Header
	body   []byte
}

// decode unmarshals the body into v, failing the test on bad JSON.
func (r response) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
}

// problem decodes a problem+json body, checking its content type and that
// its status agrees with the response's.
func (r response) problem(t *testing.T) Problem {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != problemContentType {
		t.Fatalf("Content-Type = %q, want %q (body %s)", ct, problemContentType, r.body)
	}
	var p Problem
	r.decode(t, &p)
	if p.Status != r.status {
		t.Errorf("problem status %d, response status %d", p.Status, r.status)
	}
	if p.Type == "" || p.Title == "" || p.Instance == "" || p.Instance != r.header.Get("X-Request-Id") {
		t.Errorf("problem lacks type, title or the request id as instance: %+v", p)
	}
	return p
}

// do sends a JSON request (body nil: none; string or []byte: sent as is;
// anything else: marshalled) with token as the bearer credential ("" for
// none) and validates the response against openapi.json.
func (e *env) do(method, path, token string, body any) response {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		buf, err := json.Marshal(b)
		if err != nil {
			e.t.Fatalf("marshal request: %v", err)
		}
		rd = bytes.NewReader(buf)
	}
	contentType := ""
	if rd != nil {
		contentType = "application/json"
	}
	return e.doRaw(method, path, token, contentType, rd)
}

func (e *env) doRaw(method, path, token, contentType string, body io.Reader) response {
	e.t.Helper()
	var sent []byte
	if body != nil {
		var err error
		if sent, err = io.ReadAll(body); err != nil {
			e.t.Fatalf("read request body: %v", err)
		}
		body = bytes.NewReader(sent)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, e.srv.URL+path, body)
	if err != nil {
		e.t.Fatalf("new request: %v", err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("read response: %v", err)
	}
	e.validate(req, resp, raw)
	if resp.StatusCode < 300 {
		e.validateRequest(req, sent)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: raw}
}

// validateRequest holds a request the API accepted to openapi.json, so the
// documented request schemas admit what the API admits.
func (e *env) validateRequest(req *http.Request, body []byte) {
	e.t.Helper()
	vreq := req.Clone(context.Background())
	vreq.Body = io.NopCloser(bytes.NewReader(body))
	if body == nil {
		vreq.Body = http.NoBody
	}
	e.vmu.Lock()
	ok, errs := e.v.ValidateHttpRequest(vreq)
	e.vmu.Unlock()
	if !ok {
		for _, err := range errs {
			e.t.Errorf("accepted request %s %s does not match openapi.json: %v", req.Method, req.URL.Path, err)
		}
		e.t.Errorf("request body: %s", body)
	}
}

// validate holds a response to openapi.json: its status must be documented
// for the operation and its body must match the schema.
func (e *env) validate(req *http.Request, resp *http.Response, raw []byte) {
	e.t.Helper()
	if resp.StatusCode == http.StatusMethodNotAllowed ||
		(resp.StatusCode == http.StatusNotFound && !e.knownPath(req)) {
		// Paths and methods outside the document have no operation to check.
		return
	}
	vreq := req.Clone(context.Background())
	vreq.Body = http.NoBody
	vresp := *resp
	vresp.Body = io.NopCloser(bytes.NewReader(raw))
	e.vmu.Lock()
	ok, errs := e.v.ValidateHttpResponse(vreq, &vresp)
	e.vmu.Unlock()
	if !ok {
		for _, err := range errs {
			e.t.Errorf("%s %s -> %d does not match openapi.json: %v", req.Method, req.URL.Path, resp.StatusCode, err)
			for _, se := range err.SchemaValidationErrors {
				e.t.Errorf("  schema: %s at %s", se.Reason, se.FieldPath)
			}
		}
		e.t.Errorf("body: %s", raw)
	}
}

// knownPath reports whether the request's method and path match a route.
func (e *env) knownPath(req *http.Request) bool {
	mux := (&api{}).mux()
	_, pattern := mux.Handler(req)
	return pattern != Prefix+"/" && pattern != ""
}

// operator creates an operator account and a token for it through the API
// (with the bootstrap token) and returns the token's secret.
func (e *env) operator(email string) (userID int64, secret string) {
	e.t.Helper()
	u := e.user(email, users.RoleOperator, nil)
	res := e.do("POST", Prefix+"/tokens", testBootstrap, map[string]any{"name": "tests", "user_id": u.ID})
	if res.status != http.StatusCreated {
		e.t.Fatalf("create token: %d %s", res.status, res.body)
	}
	var out tokenWithSecret
	res.decode(e.t, &out)
	return u.ID, out.Secret
}

// user creates an account directly in the repository.
func (e *env) user(email, role string, planID *int64) users.User {
	e.t.Helper()
	u, err := users.NewRepo(e.pool).Create(context.Background(), users.NewUser{
		Email: email, Password: "correct horse battery staple", Role: role, PlanID: planID,
	})
	if err != nil {
		e.t.Fatalf("create user %s: %v", email, err)
	}
	return u
}

// count runs a count(*) query.
func (e *env) count(sql string, args ...any) int {
	e.t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		e.t.Fatalf("count %q: %v", sql, err)
	}
	return n
}
