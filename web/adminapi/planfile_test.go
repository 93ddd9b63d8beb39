package adminapi

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/playground"
	"github.com/sluicehq/sluice/internal/traffic"
)

func TestPlansFile(t *testing.T) {
	e := newEnv(t)
	_, token := e.operator("op@example.com")
	res := e.do("GET", Prefix+"/plans-file", token, nil)
	if res.status != http.StatusOK || res.header.Get("Content-Type") != "application/yaml" || !strings.Contains(string(res.body), "slug: demo") {
		t.Fatalf("export: %d %s %s", res.status, res.header.Get("Content-Type"), res.body)
	}
	exported := string(res.body)
	yaml := func(method, path, body string) response {
		return e.doRaw(method, path, token, "application/yaml", strings.NewReader(body))
	}

	res = yaml("POST", Prefix+"/plans-file/diff?prune=true", exported)
	var d planDiff
	res.decode(t, &d)
	if res.status != http.StatusOK || len(d.Changes) != 0 || d.Text != "no changes\n" || d.Base == "" {
		t.Fatalf("diff of the export: %d %s", res.status, res.body)
	}

	edited := strings.Replace(exported, "name: Demo API", "name: Demo shop", 1)
	res = yaml("POST", Prefix+"/plans-file/diff", edited)
	res.decode(t, &d)
	if res.status != http.StatusOK || len(d.Changes) != 1 || d.Applied {
		t.Fatalf("diff: %d %s", res.status, res.body)
	}
	base := d.Base

	t.Run("DryRunWritesNothing", func(t *testing.T) {
		res := yaml("POST", Prefix+"/plans-file/apply?dry_run=true", edited)
		var got planDiff
		res.decode(t, &got)
		if res.status != http.StatusOK || got.Applied || len(got.Changes) != 1 {
			t.Fatalf("dry run: %d %s", res.status, res.body)
		}
		if again := e.do("GET", Prefix+"/plans-file", token, nil); string(again.body) != exported {
			t.Fatal("dry run changed the export")
		}
	})
	t.Run("InvalidFileNamesLineAndField", func(t *testing.T) {
		res := yaml("POST", Prefix+"/plans-file/apply", "version: 1\nplans:\n  - slug: x\n    nmae: X\n")
		p := res.problem(t)
		want := FieldError{Field: "plans[0].nmae", Message: `line 4: unknown field "nmae"`}
		if res.status != http.StatusBadRequest || len(p.Errors) != 2 || p.Errors[1] != want || p.Errors[0].Field != "plans[0].name" {
			t.Fatalf("bad file: %d %s", res.status, res.body)
		}
	})
	t.Run("BadQuery", func(t *testing.T) {
		res := yaml("POST", Prefix+"/plans-file/apply?prune=maybe", edited)
		if p := res.problem(t); res.status != http.StatusBadRequest || p.Errors[0].Field != "prune" {
			t.Fatalf("bad prune: %d %s", res.status, res.body)
		}
	})

	res = yaml("POST", Prefix+"/plans-file/apply?base="+base, edited)
	res.decode(t, &d)
	if res.status != http.StatusOK || !d.Applied || !strings.Contains(d.Text, `~ name: "Demo API" -> "Demo shop"`) {
		t.Fatalf("apply: %d %s", res.status, res.body)
	}
	// The reviewed base is stale now.
	res = yaml("POST", Prefix+"/plans-file/apply?base="+base, exported)
	if res.status != http.StatusConflict {
		t.Fatalf("apply on a stale base: %d %s", res.status, res.body)
	}
	res = e.do("GET", Prefix+"/plans-file?format=json", token, nil)
	if res.status != http.StatusOK || !strings.Contains(string(res.body), `"name": "Demo shop"`) {
		t.Fatalf("export after apply: %d %s", res.status, res.body)
	}
	if res := e.do("GET", Prefix+"/plans-file", "", nil); res.status != http.StatusUnauthorized {
		t.Errorf("export without a token: %d", res.status)
	}
}

func TestPlayground(t *testing.T) {
	e := newEnv(t)
	_, token := e.operator("op@example.com")
	res := e.do("GET", Prefix+"/playground/presets", token, nil)
	var list presetList
	res.decode(t, &list)
	if res.status != http.StatusOK || len(list.Items) < 4 {
		t.Fatalf("presets: %d %s", res.status, res.body)
	}
	res = e.do("POST", Prefix+"/playground", token, map[string]any{"preset": "token-bucket-seed", "algorithms": []string{"token_bucket", "fixed_window"}})
	var rep playground.Report
	res.decode(t, &rep)
	if res.status != http.StatusOK || len(rep.Runs) != 2 || rep.Runs[0].Admitted != 11 || rep.Runs[0].Rejected != 1 {
		t.Fatalf("replay: %d %s", res.status, res.body)
	}
	for _, c := range []struct {
		name  string
		body  map[string]any
		field string
	}{
		{"UnknownPreset", map[string]any{"preset": "nope"}, "preset"},
		{"NoTiers", map[string]any{}, "tiers"},
		{"BadTier", map[string]any{"preset": "steady", "tiers": []map[string]any{{"name": "x", "algorithm": "magic", "limit": 1, "window_seconds": 1}}}, "tiers[0].algorithm"},
		{"BadAlgorithm", map[string]any{"preset": "steady", "algorithms": []string{"token_bucket", "concurrency"}}, "algorithms[1]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := e.do("POST", Prefix+"/playground", token, c.body)
			if p := res.problem(t); res.status != http.StatusBadRequest || p.Errors[0].Field != c.field {
				t.Fatalf("%d %s", res.status, res.body)
			}
		})
	}
}

func TestPlaygroundRecordedTraffic(t *testing.T) {
	e := newEnv(t)
	_, token := e.operator("op@example.com")
	rec := traffic.NewRecorder(traffic.NewMemorySink(), traffic.Options{})
	// The same database and tokens, served by an API that has a recorder.
	withTraffic := &env{t: t, pool: e.pool, plans: e.plans, keys: e.keys, tokens: e.tokens, store: e.store, logs: e.logs, v: e.v}
	withTraffic.srv = httptest.NewServer(New(Deps{
		Plans: e.plans, Keys: e.keys, Tokens: e.tokens, Store: e.store, Pool: e.pool,
		Logger: slog.New(slog.DiscardHandler), Traffic: rec,
	}))
	t.Cleanup(withTraffic.srv.Close)
	// At a minute's start, so that the twelfth arrival, a second after the
	// rest, falls in the same fixed window (at :59 it did not, and was
	// admitted).
	at := time.Now().Add(-2 * time.Minute).Truncate(time.Minute)
	for i := range 12 {
		rec.Record("GET /api/search", "key:7", at.Add(time.Duration(i/11)*time.Second))
	}
	rec.Flush(t.Context())

	res := withTraffic.do("GET", Prefix+"/playground/routes", token, nil)
	var routes routeList
	res.decode(t, &routes)
	if res.status != http.StatusOK || len(routes.Items) != 1 || routes.Items[0] != "GET /api/search" {
		t.Fatalf("routes: %d %s", res.status, res.body)
	}
	res = withTraffic.do("POST", Prefix+"/playground", token, map[string]any{
		"recorded": map[string]any{"route": "GET /api/search", "hours": 1},
		"tiers":    []map[string]any{{"name": "search", "route": "GET /api/search", "algorithm": "fixed_window", "limit": 10, "window_seconds": 60}},
	})
	var ans replayAnswer
	res.decode(t, &ans)
	if res.status != http.StatusOK || len(ans.Runs) != 5 || ans.Runs[0].Admitted != 10 || ans.Runs[0].Rejected != 2 ||
		ans.Recorded == nil || ans.Recorded.Subjects["key:7"] != traffic.KindFull {
		t.Fatalf("replay of recorded traffic: %d %s", res.status, res.body)
	}
	// Without a recorder, asking for recorded traffic is a 400 naming it.
	res = e.do("POST", Prefix+"/playground", token, map[string]any{"recorded": map[string]any{"route": "GET /api/search"}, "preset": "steady"})
	if p := res.problem(t); res.status != http.StatusBadRequest || p.Errors[0].Field != "recorded" {
		t.Fatalf("recorded without a recorder: %d %s", res.status, res.body)
	}
}
