package adminapi

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/optokens"
)

func TestAuthentication(t *testing.T) {
	e := newEnv(t)
	_, live := e.operator("op@example.com")
	_, revoked := e.operator("old-op@example.com")
	var revokedID int64
	{
		res := e.do("GET", Prefix+"/tokens", testBootstrap, nil)
		var list tokenList
		res.decode(t, &list)
		for _, tok := range list.Items {
			if tok.Prefix == optokens.PrefixOf(revoked) {
				revokedID = tok.ID
			}
		}
		if res := e.do("POST", Prefix+"/tokens/"+itoa(revokedID)+"/revoke", live, nil); res.status != http.StatusOK {
			t.Fatalf("revoke token: %d %s", res.status, res.body)
		}
	}
	unknown, err := optokens.Generate()
	if err != nil {
		t.Fatal(err)
	}
	developerKey, err := apikeys.Generate()
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name          string
		header        string
		wantStatus    int
		wantChallenge string
		wantDetail    string
	}{
		{"no token", "", 401, `Bearer realm="sluice-admin"`, "needs an operator token"},
		{"wrong scheme", "Basic b3A6cHc=", 401, `Bearer realm="sluice-admin", error="invalid_request"`, "must have the form"},
		{"empty bearer", "Bearer ", 401, `Bearer realm="sluice-admin", error="invalid_request"`, "must have the form"},
		{"bad token", "Bearer not-a-token", 401, `Bearer realm="sluice-admin", error="invalid_token"`, "unknown or revoked"},
		{"unknown well-formed token", "Bearer " + unknown, 401, `Bearer realm="sluice-admin", error="invalid_token"`, "unknown or revoked"},
		{"revoked token", "Bearer " + revoked, 401, `Bearer realm="sluice-admin", error="invalid_token"`, "unknown or revoked"},
		{"developer API key", "Bearer " + developerKey, 401, `Bearer realm="sluice-admin", error="invalid_token"`, "developer API key"},
		{"bootstrap token", "Bearer " + testBootstrap, 200, "", ""},
		{"live token", "Bearer " + live, 200, "", ""},
		{"scheme is case-insensitive", "bearer " + live, 200, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest("GET", e.srv.URL+Prefix+"/plans", nil)
			if err != nil {
				t.Fatal(err)
			}
			if tt.header != "" {
				req.Header.Set("Authorization", tt.header)
			}
			resp, err := e.srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status = %d, want %d", resp.StatusCode, tt.wantStatus)
			}
			if got := resp.Header.Get("WWW-Authenticate"); got != tt.wantChallenge {
				t.Errorf("WWW-Authenticate = %q, want %q", got, tt.wantChallenge)
			}
		})
	}
	// The same cases through the validating client, to check the problem
	// bodies and their details.
	for _, tt := range tests {
		if tt.wantStatus != 401 {
			continue
		}
		t.Run(tt.name+" problem", func(t *testing.T) {
			token := strings.TrimPrefix(tt.header, "Bearer ")
			if tt.header != "" && (token == "" || token == tt.header) {
				return // do sends only a non-empty Bearer credential, or none
			}
			res := e.do("GET", Prefix+"/plans", token, nil)
			p := res.problem(t)
			if p.Type != typeUnauthorized || !strings.Contains(p.Detail, tt.wantDetail) {
				t.Errorf("problem = %+v, want type %s and detail containing %q", p, typeUnauthorized, tt.wantDetail)
			}
		})
	}
	t.Run("secrets never logged", func(t *testing.T) {
		logs := e.logs.String()
		for _, s := range []string{live, revoked, testBootstrap, developerKey} {
			if strings.Contains(logs, s) {
				t.Errorf("a credential appears in the log")
			}
		}
	})
}

func TestEveryProtectedRouteNeedsAToken(t *testing.T) {
	e := newEnv(t)
	for _, rt := range (&api{}).routes() {
		if rt.public {
			continue
		}
		t.Run(rt.operationID, func(t *testing.T) {
			path := strings.NewReplacer("{id}", "1", "{limit_id}", "1").Replace(rt.path)
			res := e.do(rt.method, path, "", nil)
			if res.status != http.StatusUnauthorized {
				t.Fatalf("status = %d, want 401", res.status)
			}
			res.problem(t)
		})
	}
}

func itoa(n int64) string {
	return strconv.FormatInt(n, 10)
}
