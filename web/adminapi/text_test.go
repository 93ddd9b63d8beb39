package adminapi

import (
	"net/http"
	"strings"
	"testing"
)

func TestTextProblems(t *testing.T) {
	for _, tt := range []struct {
		name, body string
		want       []FieldError
	}{
		{"Clean", `{"name":"Gold","limits":[{"name":"a"}]}`, nil},
		{"NULEscape", `{"name":"Go\u0000ld"}`, []FieldError{{"name", "must not contain a NUL byte"}}},
		{"InvalidUTF8", "{\"name\":\"Go\xffld\"}", []FieldError{{"name", "must be valid UTF-8"}}},
		{"Nested", "{\"slug\":\"x\",\"limits\":[{\"name\":\"ok\"},{\"route\":\"\",\"name\":\"b\xc3\"}]}",
			[]FieldError{{"limits[1].name", "must be valid UTF-8"}}},
		{"InKey", "{\"na\xffme\":1}", []FieldError{{"na\ufffdme", "is not valid UTF-8"}}},
		{"AfterNumbersAndBools", `{"a":1,"b":true,"c":null,"d":[1,2,"x\u0000"]}`, []FieldError{{"d[2]", "must not contain a NUL byte"}}},
		{"TopLevelString", `"\u0000"`, []FieldError{{"body", "must not contain a NUL byte"}}},
		{"NotJSON", `{"name":`, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := textProblems([]byte(tt.body))
			if len(got) != len(tt.want) {
				t.Fatalf("textProblems = %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("field %d = %v, want %v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

// Text Postgres cannot store, anywhere the API takes text, is a 400 naming
// the field, and nothing reaches the database or the error log.
func TestBadTextRefusedNamingTheField(t *testing.T) {
	e := newEnv(t)
	_, token := e.operator("ops@example.com")
	dev := e.user("dev@example.com", "developer", nil)
	plan := `{"slug":"gold","name":"NAME","limits":[{"name":"LIMIT","algorithm":"fixed_window","limit":10,"window_seconds":60}]}`
	for _, tt := range []struct {
		name, method, path, body, field string
	}{
		{"PlanNameNUL", "POST", "/plans", strings.Replace(strings.Replace(plan, "NAME", `Go\u0000ld`, 1), "LIMIT", "a", 1), "name"},
		{"PlanNameInvalidUTF8", "POST", "/plans", strings.Replace(strings.Replace(plan, "NAME", "Go\xffld", 1), "LIMIT", "a", 1), "name"},
		{"TierNameInvalidUTF8", "POST", "/plans", strings.Replace(strings.Replace(plan, "NAME", "Gold", 1), "LIMIT", "a\xc3", 1), "limits[0].name"},
		{"KeyNameNUL", "POST", "/keys", `{"user_id":` + itoa(dev.ID) + `,"name":"ci\u0000"}`, "name"},
		{"KeyNameInvalidUTF8", "POST", "/keys", `{"user_id":` + itoa(dev.ID) + ",\"name\":\"ci\xfe\"}", "name"},
		{"KeysQueryNUL", "GET", "/keys?q=%00", "", "q"},
		{"KeysQueryInvalidUTF8", "GET", "/keys?q=%FF", "", "q"},
		{"DevelopersQueryNUL", "GET", "/developers?q=a%00", "", "q"},
		{"AuditActorNUL", "GET", "/audit?actor=%00", "", "actor"},
		{"AuditActorInvalidUTF8", "GET", "/audit?actor=%C3", "", "actor"},
		{"TokenNameNUL", "POST", "/tokens", `{"name":"t\u0000"}`, "name"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var res response
			if tt.body == "" {
				res = e.do(tt.method, Prefix+tt.path, token, nil)
			} else {
				res = e.doRaw(tt.method, Prefix+tt.path, token, "application/json", strings.NewReader(tt.body))
			}
			if res.status != http.StatusBadRequest {
				t.Fatalf("status %d, want 400: %s", res.status, res.body)
			}
			p := res.problem(t)
			if len(p.Errors) != 1 || p.Errors[0].Field != tt.field {
				t.Errorf("errors %+v, want one naming %q", p.Errors, tt.field)
			}
		})
	}
	if n := e.count(`SELECT count(*) FROM plans WHERE slug = 'gold'`); n != 0 {
		t.Errorf("%d plans written", n)
	}
	if strings.Contains(e.logs.String(), "level=ERROR") {
		t.Errorf("error logged:\n%s", e.logs.String())
	}
}
