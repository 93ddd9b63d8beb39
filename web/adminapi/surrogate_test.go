package adminapi

import (
	"net/http"
	"strings"
	"testing"
)

func TestLoneSurrogate(t *testing.T) {
	for _, tt := range []struct {
		raw  string
		want bool
	}{
		{`"plain"`, false},
		{`"\ud83d\ude00"`, false}, // a pair: U+1F600
		{`"\uD83D\uDE00"`, false},
		{`"\u00e9\\ud800"`, false}, // an escaped backslash, then text
		{`"\\\ud800"`, true},       // an escaped backslash, then an escape
		{`"a\ud800b"`, true},
		{`"\udc00"`, true},
		{`"\ud800"`, true},
		{`"\ud800\u0041"`, true},
		{`"\ud800\ud800\udc00"`, true},
		{`"\ude00\ud83d"`, true}, // low before high
		{`"\ud8"`, false},        // not an escape: decoding reports it
	} {
		if got := loneSurrogate([]byte(tt.raw)); got != tt.want {
			t.Errorf("loneSurrogate(%s) = %v, want %v", tt.raw, got, tt.want)
		}
	}
	got := textProblems([]byte(`{"name":"ok","x\ud800":1,"limits":[{"name":"a\udfffb"}]}`))
	if len(got) != 2 || got[0].Field != "x\ufffd" || got[1] != (FieldError{"limits[0].name", loneSurrogateMessage}) {
		t.Errorf("textProblems = %+v", got)
	}
}

// TestLoneSurrogateRefusedNamingTheField: a name sent with an unpaired
// surrogate escape, which encoding/json would store as U+FFFD without a
// word, is a 400 naming the field, and nothing is written.
func TestLoneSurrogateRefusedNamingTheField(t *testing.T) {
	e := newEnv(t)
	_, token := e.operator("ops@example.com")
	dev := e.user("dev@example.com", "developer", nil)
	res := e.do("POST", Prefix+"/services", token, map[string]any{"slug": "shop", "name": "Shop", "routes": []string{"GET /items"}})
	if res.status != http.StatusCreated {
		t.Fatalf("create service: %d %s", res.status, res.body)
	}
	before := map[string]int{}
	for _, table := range []string{"plans", "api_keys", "services", "service_tokens", "operator_tokens"} {
		before[table] = e.count(`SELECT count(*) FROM ` + table)
	}
	for _, tt := range []struct {
		name, path, body, field string
	}{
		{"PlanName", "/plans", `{"slug":"gold","name":"Go\ud800ld","limits":[{"name":"a","algorithm":"fixed_window","limit":10,"window_seconds":60}]}`, "name"},
		{"PlanDescription", "/plans", `{"slug":"gold","name":"Gold","description":"\udc00","limits":[{"name":"a","algorithm":"fixed_window","limit":10,"window_seconds":60}]}`, "description"},
		{"KeyName", "/keys", `{"user_id":` + itoa(dev.ID) + `,"name":"ci\ud83d"}`, "name"},
		{"ServiceName", "/services", `{"slug":"pay","name":"Pay\udfff","routes":["GET /x"]}`, "name"},
		{"ServiceTokenName", "/services/shop/tokens", `{"name":"edge\ud800"}`, "name"},
		{"OperatorTokenName", "/tokens", `{"name":"t\ud800"}`, "name"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res := e.doRaw("POST", Prefix+tt.path, token, "application/json", strings.NewReader(tt.body))
			if res.status != http.StatusBadRequest {
				t.Fatalf("status %d, want 400: %s", res.status, res.body)
			}
			if p := res.problem(t); len(p.Errors) != 1 || p.Errors[0].Field != tt.field || !strings.Contains(p.Errors[0].Message, "surrogate") {
				t.Errorf("errors %+v, want one naming %q", p.Errors, tt.field)
			}
		})
	}
	for table, want := range before {
		if n := e.count(`SELECT count(*) FROM ` + table); n != want {
			t.Errorf("%d rows in %s, want %d as before", n, table, want)
		}
	}
	// The names, were the replacement character sent as such, are refused
	// by validation too: a name that lost a character is nobody's name.
	res = e.do("POST", Prefix+"/keys", token, map[string]any{"user_id": dev.ID, "name": "ci\ufffd"})
	if p := res.problem(t); res.status != http.StatusBadRequest || len(p.Errors) != 1 || p.Errors[0].Field != "name" || !strings.Contains(p.Errors[0].Message, "U+FFFD") {
		t.Errorf("key named with U+FFFD: %d %s", res.status, res.body)
	}
}
