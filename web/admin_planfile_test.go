package web_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/traffic"
	"github.com/sluicehq/sluice/web"
)

func TestPlansFilePages(t *testing.T) {
	e := newEnv(t)
	e.createPlan("gold", plans.LimitInput{Name: "search", Route: "GET /api/search", Algorithm: "token_bucket", Limit: 10, WindowSeconds: 60})
	c := e.signedIn(operatorEmail)

	res := c.get("/admin/plans/file/export?format=yaml", nil)
	if res.StatusCode != http.StatusOK || !strings.Contains(res.body, "slug: gold") || !strings.Contains(res.Header.Get("Content-Disposition"), "plans.yaml") {
		t.Fatalf("export: %d %s", res.StatusCode, res.body)
	}
	edited := strings.Replace(res.body, "limit: 10\n", "limit: 25\n", 1)

	res = c.post("/admin/plans/file/preview", url.Values{"text": {edited}}, nil)
	d := res.doc(t)
	if res.StatusCode != http.StatusOK || !strings.Contains(text(d, "planfile-diff"), "~ limits[search].limit: 10 -> 25") {
		t.Fatalf("preview: %d %s", res.StatusCode, text(d, "planfile-diff"))
	}
	base, _ := d.Find(`input[name="base"]`).Attr("value")
	carried, _ := d.Find(`form[action="/admin/plans/file/apply"] input[name="text"]`).Attr("value")
	if base == "" || carried != edited {
		t.Fatalf("the apply form does not carry the previewed file and its base")
	}

	t.Run("RefusedFileShowsLineAndField", func(t *testing.T) {
		res := c.post("/admin/plans/file/preview", url.Values{"text": {"version: 1\nplans:\n  - slug: x\n    name: X\n    is_default: maybe\n"}}, nil)
		d := res.doc(t)
		if res.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(text(d, "planfile-problem"), "uploaded file:5: plans[0].is_default") {
			t.Fatalf("%d %q", res.StatusCode, text(d, "planfile-problem"))
		}
	})
	t.Run("CrossSiteApplyRefused", func(t *testing.T) {
		res := c.post("/admin/plans/file/apply", url.Values{"text": {edited}, "base": {base}}, http.Header{"Sec-Fetch-Site": {"cross-site"}})
		if res.StatusCode != http.StatusForbidden {
			t.Fatalf("cross-site apply: %d", res.StatusCode)
		}
	})

	res = c.post("/admin/plans/file/apply", url.Values{"text": {edited}, "base": {base}}, nil)
	if d := res.doc(t); res.StatusCode != http.StatusOK || count(d, "planfile-applied") != 1 {
		t.Fatalf("apply: %d %s", res.StatusCode, res.body)
	}
	res = c.post("/admin/plans/file/apply", url.Values{"text": {strings.Replace(edited, "limit: 25\n", "limit: 30\n", 1)}, "base": {base}}, nil)
	if d := res.doc(t); res.StatusCode != http.StatusConflict || count(d, "planfile-conflict") != 1 || !strings.Contains(text(d, "planfile-diff"), "25 -> 30") {
		t.Fatalf("apply on a stale preview: %d", res.StatusCode)
	}
	if res := e.anonymous().get("/admin/plans/file/export", nil); res.StatusCode == http.StatusOK {
		t.Fatal("anonymous export")
	}
	if res := e.anonymous().get("/docs/plans.schema.json", nil); res.StatusCode != http.StatusOK || !strings.Contains(res.body, `"$schema"`) {
		t.Fatalf("schema: %d", res.StatusCode)
	}
}

func TestPlaygroundPage(t *testing.T) {
	e := newEnv(t)
	gold := e.createPlan("gold")
	c := e.signedIn(operatorEmail)
	res := c.get("/admin/playground?preset=token-bucket-seed&algorithm=token_bucket&limit=2&window_seconds=1&burst=10", nil)
	d := res.doc(t)
	if res.StatusCode != http.StatusOK || count(d, "playground-run") != 5 {
		t.Fatalf("replay: %d, %d runs", res.StatusCode, count(d, "playground-run"))
	}
	first := d.Find(`[data-testid="playground-run"]`).First()
	if a, _ := first.Attr("data-algorithm"); a != "token_bucket" ||
		strings.TrimSpace(first.Find(`[data-testid="run-admitted"]`).Text()) != "11" ||
		strings.TrimSpace(first.Find(`[data-testid="run-rejected"]`).Text()) != "1" {
		t.Fatalf("token bucket run: %s", first.Text())
	}
	// An existing tier as the starting point: a token bucket of 2/s with a
	// burst of 10 on its route replays the seed example exactly.
	e.createPlan("silver", plans.LimitInput{Name: "seed", Route: "GET /api/search", Algorithm: "token_bucket", Limit: 2, WindowSeconds: 1, Burst: 10})
	res = c.get("/admin/playground?preset=token-bucket-seed&from=silver/seed", nil)
	d = res.doc(t)
	first = d.Find(`[data-testid="playground-run"]`).First()
	if res.StatusCode != http.StatusOK || strings.TrimSpace(first.Find(`[data-testid="run-admitted"]`).Text()) != "11" ||
		d.Find(`[data-testid="playground-from"] option[selected]`).AttrOr("value", "") != "silver/seed" {
		t.Fatalf("replay of an existing tier: %d %s", res.StatusCode, first.Text())
	}
	res = c.get("/admin/playground?preset=steady&algorithm=fixed_window&limit=0&window_seconds=60", nil)
	if d := res.doc(t); res.StatusCode != http.StatusUnprocessableEntity || text(d, "error-limit") == "" {
		t.Fatalf("bad limit: %d", res.StatusCode)
	}
	res = c.post("/admin/playground/save", url.Values{"plan_id": {strconv.FormatInt(gold.ID, 10)}, "name": {"burst"}, "algorithm": {"token_bucket"},
		"limit": {"2"}, "window_seconds": {"1"}, "burst": {"10"}}, nil)
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("save: %d %s", res.StatusCode, res.body)
	}
	p, err := e.plans.Get(t.Context(), gold.ID)
	if err != nil || len(p.Limits) != 1 || p.Limits[0].Name != "burst" || p.Limits[0].Burst != 10 {
		t.Fatalf("saved tier: %v %+v", err, p.Limits)
	}
}

func TestPlaygroundRecordedTraffic(t *testing.T) {
	rec := traffic.NewRecorder(traffic.NewMemorySink(), traffic.Options{})
	e := newEnvWith(t, func(d *web.Deps) { d.Traffic = rec })
	at := time.Now().Add(-time.Minute).Truncate(time.Second)
	devSubject := fmt.Sprintf("dev:%d", e.dev.ID)
	for range 15 {
		rec.Record("GET /api/search", devSubject, at)
	}
	rec.Flush(t.Context())
	c := e.signedIn(operatorEmail)
	q := url.Values{"preset": {"recorded:GET /api/search"}, "algorithm": {"fixed_window"}, "limit": {"10"}, "window_seconds": {"60"}}
	res := c.get("/admin/playground?"+q.Encode(), nil)
	d := res.doc(t)
	if res.StatusCode != http.StatusOK || !strings.Contains(text(d, "playground-sampling"), "1 subject recorded in full") {
		t.Fatalf("recorded replay: %d %q", res.StatusCode, text(d, "playground-sampling"))
	}
	// The limited caller is named as people know it, not as the engine
	// keys it.
	if got := text(d, "playground-limited-subject"); got != "developer "+developerEmail+": 5 rejected, 10 admitted" {
		t.Errorf("limited subject %q, want the developer's email", got)
	}
	first := d.Find(`[data-testid="playground-run"]`).First()
	if strings.TrimSpace(first.Find(`[data-testid="run-admitted"]`).Text()) != "10" || strings.TrimSpace(first.Find(`[data-testid="run-rejected"]`).Text()) != "5" {
		t.Fatalf("fixed window over 15 recorded arrivals: %s", first.Text())
	}
	// Narrowed to a subject with no recorded arrivals, nothing is replayed.
	q.Set("subjects", "key:8")
	res = c.get("/admin/playground?"+q.Encode(), nil)
	first = res.doc(t).Find(`[data-testid="playground-run"]`).First()
	if strings.TrimSpace(first.Find(`[data-testid="run-admitted"]`).Text()) != "0" || strings.TrimSpace(first.Find(`[data-testid="run-rejected"]`).Text()) != "0" {
		t.Fatalf("recorded traffic of another subject: %s", first.Text())
	}
}

// TestPlansFileRoundTripsDashboardTiers: tiers added with the dashboard's
// form (which sends a window for every algorithm) export to a file that the
// dashboard's upload takes back as no change: a day and a month quota of one
// plan, concurrency limits, shadow and queue tiers.
func TestPlansFileRoundTripsDashboardTiers(t *testing.T) {
	e := newEnv(t)
	p := e.createPlan("team")
	c := e.signedIn(operatorEmail)
	add := fmt.Sprintf("/admin/plans/%d/limits", p.ID)
	tiers := []url.Values{
		tierForm(0, "team-day", "", "quota", "100", "60", "", "1", "reject"),
		tierForm(0, "team-month", "", "quota", "2000", "60", "", "1", "reject"),
		tierForm(0, "search-month", "GET /api/search", "quota", "500", "60", "", "", "shadow"),
		tierForm(0, "in-flight", "", "concurrency", "4", "60", "", "", "queue"),
		tierForm(0, "items", "GET /api/items/{id}", "concurrency", "2", "60", "", "", "shadow"),
		tierForm(0, "reports", "POST /api/reports", "leaky_bucket", "2", "60", "1", "", "queue"),
	}
	tiers[0].Set("period", "day")
	tiers[1].Set("period", "month")
	tiers[2].Set("period", "month")
	for _, form := range tiers {
		got, err := e.plans.Get(context.Background(), p.ID)
		if err != nil {
			t.Fatal(err)
		}
		form.Set("version", strconv.Itoa(got.Version))
		if res := c.post(add, form, nil); res.StatusCode != http.StatusSeeOther {
			t.Fatalf("add %s: status %d %v", form.Get("name"), res.StatusCode, fieldErrorsOf(res.doc(t)))
		}
	}
	res := c.get("/admin/plans/file/export?format=yaml", nil)
	if res.StatusCode != http.StatusOK || !strings.Contains(res.body, "name: team-month") {
		t.Fatalf("export: %d %s", res.StatusCode, res.body)
	}
	res = c.post("/admin/plans/file/preview", url.Values{"text": {res.body}, "prune": {"1"}}, nil)
	if d := res.doc(t); res.StatusCode != http.StatusOK || count(d, "planfile-problem") != 0 || count(d, "planfile-nochange") != 1 {
		t.Fatalf("upload of the export: %d %q %q", res.StatusCode, text(d, "planfile-problem"), text(d, "planfile-diff"))
	}
}
