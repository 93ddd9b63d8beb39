package adminapi

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/optokens"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/testenv"
)

func TestRequestBodies(t *testing.T) {
	e := newEnv(t)
	_, token := e.operator("op@example.com")
	path := Prefix + "/tokens"

	tests := []struct {
		name        string
		contentType string
		body        string
		wantStatus  int
		wantType    string
		wantDetail  string
		wantFields  []string
	}{
		{"no content type", "", `{"name":"x"}`, 415, typeUnsupportedMedia, "Content-Type must be application/json", nil},
		{"form content type", "application/x-www-form-urlencoded", `name=x`, 415, typeUnsupportedMedia, "Content-Type must be application/json", nil},
		{"text content type", "text/plain", `{"name":"x"}`, 415, typeUnsupportedMedia, "Content-Type must be application/json", nil},
		{"body over 64 KiB", "application/json", `{"name":"` + strings.Repeat("x", 70_000) + `"}`, 413, typeTooLarge, "at most 65536 bytes", nil},
		{"empty body", "application/json", ``, 400, typeMalformed, "body is empty", nil},
		{"truncated JSON", "application/json", `{"name":"x"`, 400, typeMalformed, "ends in the middle", nil},
		{"invalid JSON", "application/json", `{"name":x}`, 400, typeMalformed, "not valid JSON (at byte 9)", nil},
		{"array instead of object", "application/json", `["x"]`, 400, typeMalformed, "must be a JSON object", nil},
		{"unknown field", "application/json", `{"name":"x","admin":true}`, 400, typeMalformed, `unknown field "admin"`, []string{"admin"}},
		{"wrong type", "application/json", `{"name":7}`, 400, typeMalformed, `field "name" must be a string`, []string{"name"}},
		{"trailing garbage", "application/json", `{"name":"x"} trailing`, 400, typeMalformed, "nothing after it", nil},
		{"two objects", "application/json", `{"name":"x"}{"name":"y"}`, 400, typeMalformed, "nothing after it", nil},
		{"charset parameter is fine", "application/json; charset=utf-8", `{"name":"from charset"}`, 201, "", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := e.count(`SELECT count(*) FROM operator_tokens`)
			res := e.doRaw("POST", path, token, tt.contentType, strings.NewReader(tt.body))
			if res.status != tt.wantStatus {
				t.Fatalf("status = %d, want %d (%s)", res.status, tt.wantStatus, res.body)
			}
			after := e.count(`SELECT count(*) FROM operator_tokens`)
			if tt.wantStatus == 201 {
				if after != before+1 {
					t.Errorf("tokens %d -> %d, want one more", before, after)
				}
				return
			}
			if after != before {
				t.Errorf("tokens %d -> %d on a refused request", before, after)
			}
			p := res.problem(t)
			if p.Type != tt.wantType || !strings.Contains(p.Detail, tt.wantDetail) {
				t.Errorf("problem = %+v, want type %s, detail containing %q", p, tt.wantType, tt.wantDetail)
			}
			var fields []string
			for _, f := range p.Errors {
				fields = append(fields, f.Field)
			}
			if strings.Join(fields, ",") != strings.Join(tt.wantFields, ",") {
				t.Errorf("fields = %q, want %q", fields, tt.wantFields)
			}
		})
	}
}

func TestUnknownPathsAndMethods(t *testing.T) {
	e := newEnv(t)
	_, token := e.operator("op@example.com")
	t.Run("unknown path is a 404 problem", func(t *testing.T) {
		res := e.do("GET", Prefix+"/nothing-here", token, nil)
		if res.status != http.StatusNotFound {
			t.Fatalf("status = %d", res.status)
		}
		if p := res.problem(t); p.Type != typeNotFound {
			t.Errorf("type = %q", p.Type)
		}
	})
	t.Run("wrong method is a 405 problem with Allow", func(t *testing.T) {
		res := e.do("PATCH", Prefix+"/plans/1", token, nil)
		if res.status != http.StatusMethodNotAllowed {
			t.Fatalf("status = %d", res.status)
		}
		if got, want := res.header.Get("Allow"), "GET, HEAD, PUT, DELETE"; got != want {
			t.Errorf("Allow = %q, want %q", got, want)
		}
		if p := res.problem(t); p.Type != typeMethodNotAllowed {
			t.Errorf("type = %q", p.Type)
		}
	})
	t.Run("request id from a proxy is kept", func(t *testing.T) {
		req, _ := http.NewRequest("GET", e.srv.URL+Prefix+"/openapi.json", nil)
		req.Header.Set("X-Request-Id", "edge-42")
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("X-Request-Id"); got != "edge-42" {
			t.Errorf("X-Request-Id = %q, want edge-42", got)
		}
	})
	t.Run("unsafe request id is replaced", func(t *testing.T) {
		req, _ := http.NewRequest("GET", e.srv.URL+Prefix+"/openapi.json", nil)
		req.Header.Set("X-Request-Id", "id with spaces; and=more")
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("X-Request-Id"); len(got) != 16 {
			t.Errorf("X-Request-Id = %q, want a generated 16-hex id", got)
		}
	})
}

func TestInternalErrorsAreOpaqueAndLoggedOnce(t *testing.T) {
	pool := testenv.Postgres(t)
	// A closed pool makes every plans query fail with an error whose text
	// must not reach the client.
	closed, err := pgxpool.New(context.Background(), testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	logs := &syncBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	srv := httptest.NewServer(New(Deps{
		Plans: plans.NewService(closed, testRoutes, logger), Keys: apikeys.NewService(closed, testRoutes, logger),
		Tokens: optokens.NewStore(pool, testBootstrap), Store: memstore.New(memstore.Options{}),
		// Postgres itself answers (its ping succeeds): the failure is a bug,
		// not an outage, which TestPostgresOutageAnswers503 covers.
		Pool: pool, Logger: logger,
	}))
	defer srv.Close()

	req, _ := http.NewRequest("GET", srv.URL+Prefix+"/plans", nil)
	req.Header.Set("Authorization", "Bearer "+testBootstrap)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusInternalServerError {
		t.Fatalf("status = %d, want 500", resp.StatusCode)
	}
	res := response{status: resp.StatusCode, header: resp.Header, body: body}
	p := res.problem(t)
	id := resp.Header.Get("X-Request-Id")
	if p.Title != "Internal error" || p.Type != typeInternal || !strings.Contains(p.Detail, id) {
		t.Errorf("problem = %+v", p)
	}
	if strings.Contains(string(body), "closed") || strings.Contains(string(body), "pool") {
		t.Errorf("the internal error's text reached the client: %s", body)
	}
	if n := strings.Count(logs.String(), "request_id="+id); n != 1 {
		t.Errorf("log lines with the request id = %d, want 1:\n%s", n, logs.String())
	}
	if strings.Contains(logs.String(), testBootstrap) {
		t.Error("the bootstrap token reached the log")
	}
}

func TestNewPanicsOnMissingDeps(t *testing.T) {
	defer func() {
		got, _ := recover().(string)
		want := "adminapi.New: missing Deps.Keys, Deps.Logger, Deps.Plans, Deps.Pool, Deps.Store, Deps.Tokens"
		if got != want {
			t.Errorf("panic = %q, want %q", got, want)
		}
	}()
	New(Deps{})
}
