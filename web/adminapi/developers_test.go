package adminapi

import (
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/users"
)

func TestDevelopers(t *testing.T) {
	e := newEnv(t)
	opID, token := e.operator("op@example.com")
	var gold, silver planView
	e.do("POST", Prefix+"/plans", token, validPlan()).decode(t, &gold)
	e.do("POST", Prefix+"/plans", token, with(func(p map[string]any) { p["slug"], p["name"] = "silver", "Silver" })).decode(t, &silver)
	ann := e.user("ann@example.com", "developer", &gold.ID)
	bob := e.user("bob@example.org", "developer", nil)

	t.Run("list shows developers only, with filters", func(t *testing.T) {
		tests := []struct {
			name  string
			query string
			want  []string
		}{
			{"all", "", []string{"ann@example.com", "bob@example.org"}},
			{"by email", "?q=EXAMPLE.ORG", []string{"bob@example.org"}},
			{"by plan", "?plan_id=" + itoa(gold.ID), []string{"ann@example.com"}},
			{"paged", "?limit=1&offset=1", []string{"bob@example.org"}},
			{"no match", "?q=nobody", nil},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				var list developerList
				res := e.do("GET", Prefix+"/developers"+tt.query, token, nil)
				if res.status != http.StatusOK {
					t.Fatalf("status = %d", res.status)
				}
				res.decode(t, &list)
				var emails []string
				for _, u := range list.Items {
					emails = append(emails, u.Email)
					if u.Role != users.RoleDeveloper {
						t.Errorf("%s has role %s", u.Email, u.Role)
					}
				}
				if strings.Join(emails, ",") != strings.Join(tt.want, ",") {
					t.Errorf("emails = %q, want %q", emails, tt.want)
				}
			})
		}
		res := e.do("GET", Prefix+"/developers?plan_id=x&limit=5000", token, nil)
		if res.status != http.StatusBadRequest {
			t.Fatalf("bad filters: %d", res.status)
		}
		if p := res.problem(t); len(p.Errors) != 2 || p.Errors[0].Field != "limit" || p.Errors[1].Field != "plan_id" {
			t.Errorf("problem = %+v", p)
		}
	})

	t.Run("change plan with optimistic concurrency, audited", func(t *testing.T) {
		res := e.do("PUT", Prefix+"/developers/"+itoa(ann.ID)+"/plan", token, map[string]any{"version": ann.Version, "plan_id": silver.ID})
		if res.status != http.StatusOK {
			t.Fatalf("set plan: %d %s", res.status, res.body)
		}
		var got users.User
		res.decode(t, &got)
		if got.PlanID == nil || *got.PlanID != silver.ID || got.Version != ann.Version+1 {
			t.Errorf("after set = %+v", got)
		}
		res = e.do("PUT", Prefix+"/developers/"+itoa(ann.ID)+"/plan", token, map[string]any{"version": ann.Version, "plan_id": nil})
		if res.status != http.StatusConflict || res.problem(t).Type != typeStaleVersion {
			t.Errorf("stale set: %d %s", res.status, res.body)
		}
		tokenID := e.count(`SELECT id FROM operator_tokens WHERE user_id = $1`, opID)
		if n := e.count(`SELECT count(*) FROM audit_log WHERE action = 'user.set_plan' AND object_type = 'user'
			AND object_id = $1 AND actor = $2 AND (after->>'plan_id')::bigint = $3`, itoa(ann.ID), "token:"+itoa(int64(tokenID)), silver.ID); n != 1 {
			t.Errorf("audit entries for the plan change = %d, want 1", n)
		}
	})

	tests := []struct {
		name       string
		id         int64
		body       map[string]any
		wantStatus int
		wantFields []string
	}{
		{"missing version and plan", bob.ID, map[string]any{}, 400, []string{"version", "plan_id"}},
		{"unknown plan", bob.ID, map[string]any{"version": bob.Version, "plan_id": 999999}, 400, []string{"plan_id"}},
		{"an operator is not a developer", opID, map[string]any{"version": 1, "plan_id": gold.ID}, 404, nil},
		{"unknown developer", 999999, map[string]any{"version": 1, "plan_id": gold.ID}, 404, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			auditBefore := e.count(`SELECT count(*) FROM audit_log`)
			res := e.do("PUT", Prefix+"/developers/"+itoa(tt.id)+"/plan", token, tt.body)
			if res.status != tt.wantStatus {
				t.Fatalf("status = %d, want %d (%s)", res.status, tt.wantStatus, res.body)
			}
			var fields []string
			for _, f := range res.problem(t).Errors {
				fields = append(fields, f.Field)
			}
			if strings.Join(fields, ",") != strings.Join(tt.wantFields, ",") {
				t.Errorf("fields = %q, want %q", fields, tt.wantFields)
			}
			if n := e.count(`SELECT count(*) FROM audit_log`); n != auditBefore {
				t.Errorf("audit entries %d -> %d", auditBefore, n)
			}
		})
	}
	if v := e.count(`SELECT version FROM users WHERE id = $1`, bob.ID); v != bob.Version {
		t.Errorf("bob's version moved to %d by refused requests", v)
	}
}

func TestAuditLog(t *testing.T) {
	e := newEnv(t)
	_, token := e.operator("op@example.com")
	for _, slug := range []string{"p1", "p2", "p3"} {
		res := e.do("POST", Prefix+"/plans", testBootstrap, with(func(p map[string]any) { p["slug"] = slug }))
		if res.status != http.StatusCreated {
			t.Fatalf("create %s: %d", slug, res.status)
		}
	}

	tests := []struct {
		name      string
		query     string
		want      []string // action/actor pairs, newest first
		wantNext  bool
		wantError []string
	}{
		{"by bootstrap", "?actor=bootstrap&object_type=plan", []string{"plan.create/bootstrap", "plan.create/bootstrap", "plan.create/bootstrap"}, false, nil},
		{"tokens", "?object_type=token", []string{"token.create/bootstrap"}, false, nil},
		{"paged", "?object_type=plan&limit=2", []string{"plan.create/bootstrap", "plan.create/bootstrap"}, true, nil},
		{"future", "?since=2999-01-01T00:00:00Z", nil, false, nil},
		{"past", "?until=2001-01-01T00:00:00Z", nil, false, nil},
		{"bad filters", "?object_type=table&since=yesterday&limit=501", nil, false, []string{"object_type", "since", "limit"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := e.do("GET", Prefix+"/audit"+tt.query, token, nil)
			if tt.wantError != nil {
				if res.status != http.StatusBadRequest {
					t.Fatalf("status = %d, want 400", res.status)
				}
				var fields []string
				for _, f := range res.problem(t).Errors {
					fields = append(fields, f.Field)
				}
				if strings.Join(fields, ",") != strings.Join(tt.wantError, ",") {
					t.Errorf("fields = %q, want %q", fields, tt.wantError)
				}
				return
			}
			if res.status != http.StatusOK {
				t.Fatalf("status = %d", res.status)
			}
			var list auditList
			res.decode(t, &list)
			var got []string
			for _, en := range list.Items {
				got = append(got, en.Action+"/"+en.Actor)
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("entries = %q, want %q", got, tt.want)
			}
			if (list.NextBeforeID != nil) != tt.wantNext {
				t.Errorf("next_before_id = %v, want present %v", list.NextBeforeID, tt.wantNext)
			}
			if tt.wantNext {
				var next auditList
				e.do("GET", Prefix+"/audit?object_type=plan&limit=2&before_id="+itoa(*list.NextBeforeID), token, nil).decode(t, &next)
				if len(next.Items) != 1 || next.Items[0].ID >= *list.NextBeforeID || next.NextBeforeID != nil {
					t.Errorf("second page = %+v", next)
				}
			}
		})
	}
}

func TestOperatorTokens(t *testing.T) {
	e := newEnv(t)

	t.Run("bootstrap without any operator must name one", func(t *testing.T) {
		res := e.do("POST", Prefix+"/tokens", testBootstrap, map[string]any{"name": "first"})
		if res.status != http.StatusBadRequest {
			t.Fatalf("status = %d, want 400", res.status)
		}
		if p := res.problem(t); len(p.Errors) != 1 || p.Errors[0].Field != "user_id" {
			t.Errorf("problem = %+v", p)
		}
	})

	opID, token := e.operator("op@example.com")
	other := e.user("other@example.com", "operator", nil)
	dev := e.user("dev@example.com", "developer", nil)

	t.Run("a token's tokens belong to its operator by default", func(t *testing.T) {
		res := e.do("POST", Prefix+"/tokens", token, map[string]any{"name": "deploy"})
		if res.status != http.StatusCreated {
			t.Fatalf("create: %d %s", res.status, res.body)
		}
		var out tokenWithSecret
		res.decode(t, &out)
		if out.Token.UserID != opID || out.Token.Name != "deploy" || !strings.HasPrefix(out.Secret, "sluice_op_") {
			t.Errorf("created = %+v", out.Token)
		}
		if res := e.do("GET", Prefix+"/tokens", out.Secret, nil); res.status != http.StatusOK {
			t.Errorf("the new token does not authenticate: %d", res.status)
		}
	})
	t.Run("bootstrap tokens default to the first operator", func(t *testing.T) {
		var out tokenWithSecret
		e.do("POST", Prefix+"/tokens", testBootstrap, map[string]any{"name": "boot"}).decode(t, &out)
		if out.Token.UserID != opID {
			t.Errorf("owner = %d, want the first operator %d", out.Token.UserID, opID)
		}
	})
	t.Run("a named operator owns the token", func(t *testing.T) {
		var out tokenWithSecret
		e.do("POST", Prefix+"/tokens", token, map[string]any{"name": "theirs", "user_id": other.ID}).decode(t, &out)
		if out.Token.UserID != other.ID || out.Token.OwnerEmail != "other@example.com" {
			t.Errorf("created = %+v", out.Token)
		}
	})
	t.Run("a developer cannot own a token", func(t *testing.T) {
		res := e.do("POST", Prefix+"/tokens", token, map[string]any{"name": "nope", "user_id": dev.ID})
		if res.status != http.StatusBadRequest {
			t.Fatalf("status = %d", res.status)
		}
		if p := res.problem(t); len(p.Errors) != 1 || p.Errors[0].Field != "user_id" {
			t.Errorf("problem = %+v", p)
		}
	})
	t.Run("list never shows secrets; revoke ends a token", func(t *testing.T) {
		var list tokenList
		res := e.do("GET", Prefix+"/tokens", token, nil)
		res.decode(t, &list)
		if len(list.Items) != 4 || strings.Contains(string(res.body), token) || strings.Contains(string(res.body), `"secret"`) {
			t.Fatalf("list = %s", res.body)
		}
		self := list.Items[len(list.Items)-1]
		res = e.do("POST", Prefix+"/tokens/"+itoa(self.ID)+"/revoke", token, nil)
		if res.status != http.StatusOK {
			t.Fatalf("revoke: %d %s", res.status, res.body)
		}
		var revoked struct {
			RevokedAt *string `json:"revoked_at"`
		}
		res.decode(t, &revoked)
		if revoked.RevokedAt == nil {
			t.Error("revoked_at is null after revoke")
		}
		if res := e.do("GET", Prefix+"/tokens", token, nil); res.status != http.StatusUnauthorized {
			t.Errorf("revoked token still works: %d", res.status)
		}
		if res := e.do("POST", Prefix+"/tokens/999999/revoke", testBootstrap, nil); res.status != http.StatusNotFound {
			t.Errorf("revoke unknown: %d, want 404", res.status)
		}
		if n := e.count(`SELECT count(*) FROM audit_log WHERE action = 'token.revoke' AND actor = $1`, "token:"+itoa(self.ID)); n != 1 {
			t.Errorf("revoke audit entries by the token itself = %d, want 1", n)
		}
	})
}
