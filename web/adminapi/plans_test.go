package adminapi

import (
	"net/http"
	"slices"
	"strings"
	"testing"
)

// validPlan is a plan body that passes validation; cases change one thing.
func validPlan() map[string]any {
	return map[string]any{
		"slug": "gold", "name": "Gold", "description": "For serious callers",
		"limits": []any{
			map[string]any{"name": "global", "algorithm": "fixed_window", "limit": 100, "window_seconds": 60},
			map[string]any{"name": "search", "route": "GET /api/search", "algorithm": "token_bucket", "limit": 10, "window_seconds": 1, "burst": 20},
		},
	}
}

func validLimit() map[string]any {
	return map[string]any{"name": "items", "route": "GET /api/items/{id}", "algorithm": "sliding_window_counter", "limit": 50, "window_seconds": 60}
}

// with returns a copy of validPlan changed by edit.
func with(edit func(p map[string]any)) map[string]any {
	p := validPlan()
	edit(p)
	return p
}

func withLimit(i int, key string, value any) map[string]any {
	return with(func(p map[string]any) {
		p["limits"].([]any)[i].(map[string]any)[key] = value
	})
}

func limitWith(edit func(l map[string]any)) map[string]any {
	l := validLimit()
	edit(l)
	return l
}

func TestInvalidPlanAndTierPayloads(t *testing.T) {
	e := newEnv(t)
	_, token := e.operator("op@example.com")

	// An existing plan for the update and tier cases.
	res := e.do("POST", Prefix+"/plans", token, validPlan())
	if res.status != http.StatusCreated {
		t.Fatalf("create plan: %d %s", res.status, res.body)
	}
	var gold planView
	res.decode(t, &gold)
	planPath := Prefix + "/plans/" + itoa(gold.ID)
	limitPath := planPath + "/limits/" + itoa(gold.Limits[0].ID)
	versioned := func(body map[string]any) map[string]any {
		body["version"] = gold.Version
		return body
	}

	tests := []struct {
		name       string
		method     string
		path       string
		body       any
		wantType   string
		wantFields []string
	}{
		{"empty slug", "POST", Prefix + "/plans", with(func(p map[string]any) { p["slug"] = "" }), typeValidation, []string{"slug"}},
		{"uppercase slug", "POST", Prefix + "/plans", with(func(p map[string]any) { p["slug"] = "Gold" }), typeValidation, []string{"slug"}},
		{"slug of 64 characters", "POST", Prefix + "/plans", with(func(p map[string]any) { p["slug"] = strings.Repeat("a", 64) }), typeValidation, []string{"slug"}},
		{"empty name", "POST", Prefix + "/plans", with(func(p map[string]any) { p["name"] = "  " }), typeValidation, []string{"name"}},
		{"name of 101 characters", "POST", Prefix + "/plans", with(func(p map[string]any) { p["name"] = strings.Repeat("n", 101) }), typeValidation, []string{"name"}},
		{"description too long", "POST", Prefix + "/plans", with(func(p map[string]any) { p["description"] = strings.Repeat("d", 2001) }), typeValidation, []string{"description"}},
		{"limit name with capitals", "POST", Prefix + "/plans", withLimit(0, "name", "Global"), typeValidation, []string{"limits[0].name"}},
		{"limit of zero", "POST", Prefix + "/plans", withLimit(0, "limit", 0), typeValidation, []string{"limits[0].limit"}},
		{"negative limit", "POST", Prefix + "/plans", withLimit(0, "limit", -5), typeValidation, []string{"limits[0].limit"}},
		{"window of zero", "POST", Prefix + "/plans", withLimit(0, "window_seconds", 0), typeValidation, []string{"limits[0].window_seconds"}},
		{"window over 31 days", "POST", Prefix + "/plans", withLimit(0, "window_seconds", 31*24*3600+1), typeValidation, []string{"limits[0].window_seconds"}},
		{"unknown algorithm", "POST", Prefix + "/plans", withLimit(0, "algorithm", "random_drop"), typeValidation, []string{"limits[0].algorithm"}},
		{"unknown mode", "POST", Prefix + "/plans", withLimit(0, "mode", "ignore"), typeValidation, []string{"limits[0].mode"}},
		{"queue mode without leaky bucket", "POST", Prefix + "/plans", withLimit(0, "mode", "queue"), typeValidation, []string{"limits[0].mode"}},
		{"unknown route", "POST", Prefix + "/plans", withLimit(1, "route", "GET /api/nope"), typeValidation, []string{"limits[1].route"}},
		{"unknown count_per", "POST", Prefix + "/plans", withLimit(0, "count_per", "team"), typeValidation, []string{"limits[0].count_per"}},
		{"unknown precision", "POST", Prefix + "/plans", withLimit(0, "precision", "roughly"), typeValidation, []string{"limits[0].precision"}},
		{"leased concurrency", "POST", Prefix + "/plans", with(func(p map[string]any) {
			p["limits"].([]any)[0] = map[string]any{"name": "inflight", "algorithm": "concurrency", "limit": 5, "precision": "leased"}
		}), typeValidation, []string{"limits[0].precision"}},
		{"tier add with a local quota", "POST", planPath + "/limits", versioned(limitWith(func(l map[string]any) {
			l["algorithm"], l["period"], l["precision"] = "quota", "month", "local"
		})), typeValidation, []string{"precision"}},
		{"plan-wide degrade", "POST", Prefix + "/plans", withLimit(0, "mode", "degrade"), typeValidation, []string{"limits[0].mode"}},
		{"degrade on items, which has no reduced answer", "POST", Prefix + "/plans", with(func(p map[string]any) {
			l := p["limits"].([]any)[0].(map[string]any)
			l["route"], l["mode"] = "GET /api/items/{id}", "degrade"
		}), typeValidation, []string{"limits[0].mode"}},
		{"burst on a fixed window", "POST", Prefix + "/plans", withLimit(0, "burst", 5), typeValidation, []string{"limits[0].burst"}},
		{"token bucket burst below cost", "POST", Prefix + "/plans", with(func(p map[string]any) {
			l := p["limits"].([]any)[1].(map[string]any)
			l["burst"], l["cost"] = 2, 5
		}), typeValidation, []string{"limits[1].burst"}},
		{"leaky bucket negative burst", "POST", Prefix + "/plans", with(func(p map[string]any) {
			l := p["limits"].([]any)[1].(map[string]any)
			l["algorithm"], l["burst"] = "leaky_bucket", -1
		}), typeValidation, []string{"limits[1].burst"}},
		{"cost above limit", "POST", Prefix + "/plans", withLimit(0, "cost", 101), typeValidation, []string{"limits[0].cost"}},
		{"cost above a million", "POST", Prefix + "/plans", with(func(p map[string]any) {
			l := p["limits"].([]any)[0].(map[string]any)
			l["limit"], l["cost"] = 10_000_000, 1_000_001
		}), typeValidation, []string{"limits[0].cost"}},
		{"duplicate tier name", "POST", Prefix + "/plans", withLimit(1, "name", "global"), typeValidation, []string{"limits[1].name"}},
		{"duplicate tier shape", "POST", Prefix + "/plans", with(func(p map[string]any) {
			p["limits"] = append(p["limits"].([]any), map[string]any{
				"name": "search2", "route": "GET /api/search", "algorithm": "token_bucket", "limit": 99, "window_seconds": 1})
		}), typeValidation, []string{"limits[2].route"}},
		{"every error at once", "POST", Prefix + "/plans", with(func(p map[string]any) {
			p["slug"], p["name"] = "-bad", ""
			p["limits"].([]any)[0].(map[string]any)["window_seconds"] = 0
		}), typeValidation, []string{"slug", "name", "limits[0].window_seconds"}},
		{"unknown field", "POST", Prefix + "/plans", with(func(p map[string]any) { p["colour"] = "gold" }), typeMalformed, []string{"colour"}},
		{"unknown tier field", "POST", Prefix + "/plans", withLimit(0, "per", "minute"), typeMalformed, []string{"per"}},
		{"string where a number belongs", "POST", Prefix + "/plans", withLimit(0, "limit", "ten"), typeMalformed, []string{"limits.limit"}},
		{"update without version", "PUT", planPath, validPlan(), typeValidation, []string{"version"}},
		{"update with a bad window", "PUT", planPath, versioned(withLimit(0, "window_seconds", -1)), typeValidation, []string{"limits[0].window_seconds"}},
		{"update with a bad slug", "PUT", planPath, versioned(with(func(p map[string]any) { p["slug"] = "a b" })), typeValidation, []string{"slug"}},
		{"tier add with limit zero", "POST", planPath + "/limits", versioned(limitWith(func(l map[string]any) { l["limit"] = 0 })), typeValidation, []string{"limit"}},
		{"tier add duplicating a name", "POST", planPath + "/limits", versioned(limitWith(func(l map[string]any) { l["name"] = "global" })), typeValidation, []string{"name"}},
		{"tier add with unknown route", "POST", planPath + "/limits", versioned(limitWith(func(l map[string]any) { l["route"] = "DELETE /api/items/{id}" })), typeValidation, []string{"route"}},
		{"tier add without version", "POST", planPath + "/limits", validLimit(), typeValidation, []string{"version"}},
		{"tier add with unknown count_when", "POST", planPath + "/limits", versioned(limitWith(func(l map[string]any) { l["count_when"] = "sometimes" })), typeValidation, []string{"count_when"}},
		{"tier add with a cost header that is no header name", "POST", planPath + "/limits", versioned(limitWith(func(l map[string]any) { l["cost_header"] = "X Tokens" })), typeValidation, []string{"cost_header"}},
		{"tier update settling a sliding log", "PUT", limitPath, versioned(limitWith(func(l map[string]any) { l["algorithm"], l["count_when"] = "sliding_window_log", "success" })), typeValidation, []string{"count_when"}},
		{"tier update with unknown algorithm", "PUT", limitPath, versioned(limitWith(func(l map[string]any) { l["algorithm"] = "gcra" })), typeValidation, []string{"algorithm"}},
		{"tier update with queue on token bucket", "PUT", limitPath, versioned(limitWith(func(l map[string]any) { l["algorithm"], l["mode"] = "token_bucket", "queue" })), typeValidation, []string{"mode"}},
		{"tier delete without version", "DELETE", limitPath, nil, typeValidation, []string{"version"}},
		{"tier delete with a bad version", "DELETE", limitPath + "?version=abc", nil, typeValidation, []string{"version"}},
	}
	if n := len(tests); n < 20 {
		t.Fatalf("only %d invalid payloads; the issue asks for at least 20", n)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plansBefore := e.count(`SELECT count(*) FROM plans`)
			limitsBefore := e.count(`SELECT count(*) FROM plan_limits`)
			auditBefore := e.count(`SELECT count(*) FROM audit_log`)
			versionBefore := e.count(`SELECT version FROM plans WHERE id = $1`, gold.ID)

			res := e.do(tt.method, tt.path, token, tt.body)
			if res.status != http.StatusBadRequest {
				t.Fatalf("status = %d, want 400; body %s", res.status, res.body)
			}
			p := res.problem(t)
			if p.Type != tt.wantType {
				t.Errorf("type = %q, want %q", p.Type, tt.wantType)
			}
			var fields []string
			for _, f := range p.Errors {
				fields = append(fields, f.Field)
				if f.Message == "" {
					t.Errorf("field %s has no message", f.Field)
				}
			}
			if !slices.Equal(fields, tt.wantFields) {
				t.Errorf("fields = %q, want %q (%s)", fields, tt.wantFields, res.body)
			}

			if n := e.count(`SELECT count(*) FROM plans`); n != plansBefore {
				t.Errorf("plans: %d before, %d after", plansBefore, n)
			}
			if n := e.count(`SELECT count(*) FROM plan_limits`); n != limitsBefore {
				t.Errorf("limits: %d before, %d after", limitsBefore, n)
			}
			if n := e.count(`SELECT count(*) FROM audit_log`); n != auditBefore {
				t.Errorf("audit entries: %d before, %d after", auditBefore, n)
			}
			if v := e.count(`SELECT version FROM plans WHERE id = $1`, gold.ID); v != versionBefore {
				t.Errorf("plan version moved from %d to %d", versionBefore, v)
			}
		})
	}
}

func TestPlanLifecycleAndConflicts(t *testing.T) {
	e := newEnv(t)
	opID, token := e.operator("op@example.com")
	tokenID := e.count(`SELECT id FROM operator_tokens WHERE user_id = $1`, opID)
	actor := "token:" + itoa(int64(tokenID))

	res := e.do("POST", Prefix+"/plans", token, validPlan())
	if res.status != http.StatusCreated {
		t.Fatalf("create: %d %s", res.status, res.body)
	}
	var gold planView
	res.decode(t, &gold)
	if loc := res.header.Get("Location"); loc != Prefix+"/plans/"+itoa(gold.ID) {
		t.Errorf("Location = %q", loc)
	}
	if gold.Slug != "gold" || gold.Name != "Gold" || !gold.IsPublic || gold.Version != 1 || len(gold.Limits) != 2 ||
		gold.Limits[1].Route != "GET /api/search" || gold.Limits[1].Burst != 20 || gold.Assigned.Keys != 0 {
		t.Errorf("created plan = %+v", gold)
	}
	if n := e.count(`SELECT count(*) FROM audit_log WHERE action = 'plan.create' AND actor = $1 AND object_id = $2`,
		actor, itoa(gold.ID)); n != 1 {
		t.Errorf("plan.create audit entries by %s = %d, want 1", actor, n)
	}
	planPath := Prefix + "/plans/" + itoa(gold.ID)

	t.Run("duplicate slug is a conflict naming slug", func(t *testing.T) {
		res := e.do("POST", Prefix+"/plans", token, validPlan())
		if res.status != http.StatusConflict {
			t.Fatalf("status = %d, want 409", res.status)
		}
		p := res.problem(t)
		if p.Type != typeConflict || len(p.Errors) != 1 || p.Errors[0].Field != "slug" {
			t.Errorf("problem = %+v", p)
		}
	})

	t.Run("stale version is refused and nothing changes", func(t *testing.T) {
		body := with(func(p map[string]any) { p["name"] = "Gold v2" })
		body["version"] = 1
		res := e.do("PUT", planPath, token, body)
		if res.status != http.StatusOK {
			t.Fatalf("first update: %d %s", res.status, res.body)
		}
		var updated planView
		res.decode(t, &updated)
		if updated.Version != 2 || updated.Name != "Gold v2" {
			t.Fatalf("updated = %+v", updated)
		}
		body["name"] = "Gold v3 from a stale read"
		res = e.do("PUT", planPath, token, body)
		if res.status != http.StatusConflict {
			t.Fatalf("stale update: %d, want 409", res.status)
		}
		if p := res.problem(t); p.Type != typeStaleVersion {
			t.Errorf("type = %q, want %q", p.Type, typeStaleVersion)
		}
		var now planView
		e.do("GET", planPath, token, nil).decode(t, &now)
		if now.Name != "Gold v2" || now.Version != 2 {
			t.Errorf("after a stale update the plan is %q v%d, want Gold v2 v2", now.Name, now.Version)
		}
	})

	t.Run("tier edits bump the version and refuse stale ones", func(t *testing.T) {
		body := validLimit()
		body["version"] = 2
		res := e.do("POST", planPath+"/limits", token, body)
		if res.status != http.StatusCreated {
			t.Fatalf("add limit: %d %s", res.status, res.body)
		}
		var p planView
		res.decode(t, &p)
		if p.Version != 3 || len(p.Limits) != 3 || p.Limits[2].Name != "items" {
			t.Fatalf("after add: v%d, %d limits", p.Version, len(p.Limits))
		}
		res = e.do("POST", planPath+"/limits", token, body)
		if res.status != http.StatusConflict || res.problem(t).Type != typeStaleVersion {
			t.Errorf("stale add: %d %s", res.status, res.body)
		}
		upd := limitWith(func(l map[string]any) { l["limit"] = 75 })
		upd["version"] = 3
		res = e.do("PUT", planPath+"/limits/"+itoa(p.Limits[2].ID), token, upd)
		if res.status != http.StatusOK {
			t.Fatalf("update limit: %d %s", res.status, res.body)
		}
		res.decode(t, &p)
		if p.Version != 4 || p.Limits[2].Limit != 75 {
			t.Errorf("after update: v%d limit %d", p.Version, p.Limits[2].Limit)
		}
		res = e.do("DELETE", planPath+"/limits/"+itoa(p.Limits[2].ID)+"?version=3", token, nil)
		if res.status != http.StatusConflict {
			t.Errorf("stale delete: %d", res.status)
		}
		res = e.do("DELETE", planPath+"/limits/"+itoa(p.Limits[2].ID)+"?version=4", token, nil)
		if res.status != http.StatusOK {
			t.Fatalf("delete limit: %d %s", res.status, res.body)
		}
		res.decode(t, &p)
		if p.Version != 5 || len(p.Limits) != 2 {
			t.Errorf("after delete: v%d, %d limits", p.Version, len(p.Limits))
		}
		res = e.do("DELETE", planPath+"/limits/999999?version=5", token, nil)
		if res.status != http.StatusNotFound {
			t.Errorf("delete unknown limit: %d", res.status)
		}
	})

	t.Run("delete is refused while a developer uses the plan", func(t *testing.T) {
		dev := e.user("dev@example.com", "developer", &gold.ID)
		res := e.do("DELETE", planPath, token, nil)
		if res.status != http.StatusConflict {
			t.Fatalf("status = %d, want 409", res.status)
		}
		if p := res.problem(t); p.Type != typeInUse {
			t.Errorf("type = %q, want %q", p.Type, typeInUse)
		}
		if n := e.count(`SELECT count(*) FROM plans WHERE id = $1`, gold.ID); n != 1 {
			t.Fatal("plan deleted despite the conflict")
		}
		var listed planList
		e.do("GET", Prefix+"/plans", token, nil).decode(t, &listed)
		if len(listed.Items) != 1 || listed.Items[0].Assigned.Developers != 1 {
			t.Errorf("listed = %+v, want one plan with one developer", listed.Items)
		}
		if _, err := e.pool.Exec(t.Context(), `UPDATE users SET plan_id = NULL WHERE id = $1`, dev.ID); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("delete an unused plan", func(t *testing.T) {
		res := e.do("DELETE", planPath, token, nil)
		if res.status != http.StatusNoContent {
			t.Fatalf("status = %d, want 204 (%s)", res.status, res.body)
		}
		if res := e.do("GET", planPath, token, nil); res.status != http.StatusNotFound {
			t.Errorf("GET after delete: %d, want 404", res.status)
		}
		if res := e.do("DELETE", planPath, token, nil); res.status != http.StatusNotFound {
			t.Errorf("second delete: %d, want 404", res.status)
		}
	})

	t.Run("bad path id", func(t *testing.T) {
		res := e.do("GET", Prefix+"/plans/abc", token, nil)
		if res.status != http.StatusBadRequest {
			t.Fatalf("status = %d, want 400", res.status)
		}
		if p := res.problem(t); len(p.Errors) != 1 || p.Errors[0].Field != "id" {
			t.Errorf("problem = %+v", p)
		}
	})
}

// TestTierCostSettledAfterTheResponse: a tier's count_when and cost_header
// are taken by the admin API, stored, and read back (the header in one
// spelling), and an edit that leaves them out goes back to the defaults.
func TestTierCostSettledAfterTheResponse(t *testing.T) {
	e := newEnv(t)
	_, token := e.operator("op@example.com")
	res := e.do("POST", Prefix+"/plans", token, validPlan())
	if res.status != http.StatusCreated {
		t.Fatalf("create plan: %d %s", res.status, res.body)
	}
	var p planView
	res.decode(t, &p)
	planPath := Prefix + "/plans/" + itoa(p.ID)
	body := limitWith(func(l map[string]any) { l["count_when"], l["cost_header"] = "success", "x-tokens-used" })
	body["version"] = p.Version
	res = e.do("POST", planPath+"/limits", token, body)
	if res.status != http.StatusCreated {
		t.Fatalf("add tier: %d %s", res.status, res.body)
	}
	res.decode(t, &p)
	l := p.Limits[2]
	if l.CountWhen != "success" || l.CostHeader != "X-Tokens-Used" || p.Limits[0].CountWhen != "always" || p.Limits[0].CostHeader != "" {
		t.Fatalf("tiers read back as %+v and %+v", l, p.Limits[0])
	}
	body = validLimit()
	body["version"] = p.Version
	res = e.do("PUT", planPath+"/limits/"+itoa(l.ID), token, body)
	if res.status != http.StatusOK {
		t.Fatalf("update tier: %d %s", res.status, res.body)
	}
	res.decode(t, &p)
	if l := p.Limits[2]; l.CountWhen != "always" || l.CostHeader != "" {
		t.Errorf("after an edit without them: count_when %q, cost_header %q", l.CountWhen, l.CostHeader)
	}
}
