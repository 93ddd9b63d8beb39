package web_test

import (
	"context"
	"encoding/csv"
	"html"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/httplimit"
	"github.com/sluicehq/sluice/internal/history"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/users"
	"github.com/sluicehq/sluice/web"
)

// historyEnv is an env whose UI reads the usage history, with a recorder
// writing to it and two developers' keys.
type historyEnv struct {
	*env
	rec            *history.Recorder
	plan           plans.Plan
	key, otherKey  apikeys.Key
	other          users.User
	devCaller      enforce.Caller
	otherDevCaller enforce.Caller
}

func newHistoryEnv(t *testing.T) *historyEnv {
	t.Helper()
	ctx := context.Background()
	e := newEnvWith(t, func(d *web.Deps) { d.History = history.NewReader(d.Pool) })
	h := &historyEnv{env: e, rec: history.NewRecorder(e.pool, history.Options{})}
	h.plan = e.defaultPlan()
	var err error
	if h.other, err = e.users.Create(ctx, users.NewUser{Email: "other@example.com", Password: testPassword, Role: users.RoleDeveloper}); err != nil {
		t.Fatal(err)
	}
	if h.key, _, err = e.keys.Create(ctx, "test", apikeys.NewKey{UserID: e.dev.ID, Name: "=cmd|calc"}); err != nil {
		t.Fatal(err)
	}
	if h.otherKey, _, err = e.keys.Create(ctx, "test", apikeys.NewKey{UserID: h.other.ID, Name: "other-key"}); err != nil {
		t.Fatal(err)
	}
	h.devCaller = enforce.Caller{Subject: enforce.DeveloperSubject(e.dev.ID), Key: enforce.KeyScope(h.key.ID), KeyID: h.key.ID, UserID: e.dev.ID, Plan: h.plan.Slug}
	h.otherDevCaller = enforce.Caller{Subject: enforce.DeveloperSubject(h.other.ID), Key: enforce.KeyScope(h.otherKey.ID), KeyID: h.otherKey.ID, UserID: h.other.ID, Plan: h.plan.Slug}
	return h
}

func (h *historyEnv) record(c enforce.Caller, route string, admitted, rejected int) {
	for range admitted {
		h.rec.RecordDecision(c, route, 1, true)
	}
	for range rejected {
		h.rec.RecordDecision(c, route, 1, false)
	}
}

func (h *historyEnv) flush() {
	h.t.Helper()
	if err := h.rec.Flush(context.Background()); err != nil {
		h.t.Fatal(err)
	}
}

func readCSV(t *testing.T, body string) [][]string {
	t.Helper()
	rows, err := csv.NewReader(strings.NewReader(body)).ReadAll()
	if err != nil {
		t.Fatalf("CSV: %v\n%s", err, body)
	}
	return rows
}

func TestAdminHistoryShowsAndDownloadsTheTraffic(t *testing.T) {
	h := newHistoryEnv(t)
	h.record(h.devCaller, "GET /api/search", 7, 3)
	h.record(h.otherDevCaller, "GET /api/items/{id}", 4, 0)
	h.record(enforce.Caller{Subject: "ip:203.0.113.9", Plan: "anonymous"}, "GET /api/search", 2, 5)
	h.flush()
	op := h.signedIn(operatorEmail)

	for _, tc := range []struct {
		name, query                string
		admitted, rejected, routes int
	}{
		{"everything", "", 13, 8, 2},
		{"one developer", "?developer=" + strconv.FormatInt(h.dev.ID, 10), 7, 3, 1},
		{"one key", "?key=" + strconv.FormatInt(h.otherKey.ID, 10), 4, 0, 1},
		{"one route", "?route=" + "GET+%2Fapi%2Fsearch", 9, 8, 1},
		{"anonymous", "?anonymous=1", 2, 5, 1},
		{"a plan by slug, per hour", "?range=7d&plan=" + h.plan.Slug, 11, 3, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := op.get("/admin/history"+tc.query, nil)
			if res.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", res.StatusCode, res.body)
			}
			d := res.doc(t)
			if got := text(d, "history-admitted"); got != strconv.Itoa(tc.admitted) {
				t.Errorf("admitted %q, want %d", got, tc.admitted)
			}
			if got := text(d, "history-rejected"); got != strconv.Itoa(tc.rejected) {
				t.Errorf("rejected %q, want %d", got, tc.rejected)
			}
			if got := count(d, "history-by-route-row"); got != tc.routes {
				t.Errorf("%d route rows, want %d", got, tc.routes)
			}
			if d.Find(`[data-testid="history-admitted-bars"]`).AttrOr("d", "") == "" {
				t.Error("the chart draws no admitted bar")
			}
		})
	}

	// Each breakdown row narrows the history to itself.
	d := op.get("/admin/history?range=1h", nil).doc(t)
	links := map[string]string{}
	d.Find(`[data-testid="history-by-developer-row"] a, [data-testid="history-by-route-row"] a`).Each(func(_ int, a *goquery.Selection) {
		links[a.Text()] = a.AttrOr("href", "")
	})
	if got, want := links[developerEmail], "/admin/history?developer="+strconv.FormatInt(h.dev.ID, 10)+"&range=1h"; got != want {
		t.Errorf("developer link %q, want %q (all links %v)", got, want, links)
	}
	if got, want := links["GET /api/items/{id}"], "/admin/history?range=1h&route=GET+%2Fapi%2Fitems%2F%7Bid%7D"; got != want {
		t.Errorf("route link %q, want %q", got, want)
	}

	res := op.get("/admin/history.csv?developer="+strconv.FormatInt(h.dev.ID, 10), nil)
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/csv") {
		t.Fatalf("CSV: status %d, type %q", res.StatusCode, res.Header.Get("Content-Type"))
	}
	rows := readCSV(t, res.body)
	want := []string{"time", "plan", "route", "key_id", "key_name", "developer_id", "developer_email", "address_block", "admitted", "rejected"}
	if len(rows) != 2 || strings.Join(rows[0], ",") != strings.Join(want, ",") {
		t.Fatalf("CSV rows %q, want the header and one row", rows)
	}
	r := rows[1]
	if _, err := time.Parse(time.RFC3339, r[0]); err != nil || r[1] != h.plan.Slug || r[2] != "GET /api/search" ||
		r[3] != strconv.FormatInt(h.key.ID, 10) || r[4] != "'=cmd|calc" || r[5] != strconv.FormatInt(h.dev.ID, 10) ||
		r[6] != developerEmail || r[7] != "" || r[8] != "7" || r[9] != "3" {
		t.Errorf("CSV row %q, want the developer's minute with the key name kept as text", r)
	}

	res = op.get("/admin/history.csv?anonymous=1", nil)
	rows = readCSV(t, res.body)
	if len(rows) != 2 || rows[1][7] != "203.0.113.0/24" || rows[1][8] != "2" || rows[1][9] != "5" || rows[1][3] != "" {
		t.Errorf("anonymous CSV %q, want one row for 203.0.113.0/24 with 2 and 5", rows)
	}
}

func TestHistoryRefusesBadInputNamingTheField(t *testing.T) {
	h := newHistoryEnv(t)
	op := h.signedIn(operatorEmail)
	for _, tc := range []struct{ query, field string }{
		{"?range=2y", `"range"`},
		{"?developer=abc", `"developer"`},
		{"?key=-1", `"key"`},
	} {
		for _, path := range []string{"/admin/history", "/admin/history.csv"} {
			res := op.get(path+tc.query, nil)
			if res.StatusCode != http.StatusBadRequest || !strings.Contains(html.UnescapeString(res.body), "The field "+tc.field) {
				t.Errorf("%s%s: status %d, want 400 naming %s", path, tc.query, res.StatusCode, tc.field)
			}
		}
	}
	if res := h.signedIn(developerEmail).get("/admin/history", nil); res.StatusCode != http.StatusForbidden && res.StatusCode != http.StatusNotFound {
		t.Errorf("a developer on /admin/history: status %d, want 403 or 404", res.StatusCode)
	}
}

func TestAppHistoryShowsOnlyTheDevelopersOwnKeys(t *testing.T) {
	h := newHistoryEnv(t)
	h.record(h.devCaller, "GET /api/search", 5, 1)
	h.record(h.otherDevCaller, "GET /api/search", 50, 10)
	h.flush()
	dev := h.signedIn(developerEmail)
	// Whatever the query names, only the signed-in developer's rows.
	for _, q := range []string{"", "?developer=" + strconv.FormatInt(h.other.ID, 10), "?anonymous=1", "?key=" + strconv.FormatInt(h.otherKey.ID, 10)} {
		res := dev.get("/app/history"+q, nil)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("/app/history%s: status %d", q, res.StatusCode)
		}
		d := res.doc(t)
		wantA, wantR := "5", "1"
		if strings.HasPrefix(q, "?key=") {
			wantA, wantR = "0", "0" // another developer's key: nothing of theirs
		}
		if a, r := text(d, "history-admitted"), text(d, "history-rejected"); a != wantA || r != wantR {
			t.Errorf("/app/history%s: admitted %s rejected %s, want %s and %s", q, a, r, wantA, wantR)
		}
		csvRes := dev.get("/app/history.csv"+q, nil)
		rows := readCSV(t, csvRes.body)
		for _, row := range rows[1:] {
			if row[5] != strconv.FormatInt(h.dev.ID, 10) {
				t.Errorf("/app/history.csv%s holds another developer's row %q", q, row)
			}
		}
	}
}

func TestOverviewShowsAnonymousTraffic(t *testing.T) {
	h := newHistoryEnv(t)
	h.record(enforce.Caller{Subject: "ip:198.51.100.20", Plan: "anonymous"}, "GET /api/search", 3, 9)
	h.record(enforce.Caller{Subject: "ip:2001:db8:5:6::/64", Plan: "anonymous"}, "GET /api/search", 1, 0)
	h.flush()
	d := h.signedIn(operatorEmail).get("/admin", nil).doc(t)
	if a, r := text(d, "anonymous-admitted"), text(d, "anonymous-rejected"); a != "4" || r != "9" {
		t.Errorf("anonymous admitted %s rejected %s, want 4 and 9", a, r)
	}
	blocks := d.Find(`[data-testid="anonymous-block-row"]`)
	if blocks.Length() != 2 || !strings.Contains(blocks.First().Text(), "198.51.100.0/24") || !strings.Contains(blocks.Last().Text(), "2001:db8:5::/48") {
		t.Errorf("blocks %q, want 198.51.100.0/24 then 2001:db8:5::/48", blocks.Text())
	}
}

func TestPlanPageShowsWhoShadowTiersWouldHaveRejected(t *testing.T) {
	h := newHistoryEnv(t)
	ctx := context.Background()
	p, err := h.plans.AddLimit(ctx, "test", h.plan.ID, h.plan.Version, plans.LimitInput{
		Name: "trial", Route: "GET /api/search", Algorithm: "fixed_window", Mode: "shadow", Limit: 1, WindowSeconds: 3600,
	})
	if err != nil {
		t.Fatal(err)
	}
	op := h.signedIn(operatorEmail)
	d := op.get("/admin/plans/"+strconv.FormatInt(p.ID, 10), nil).doc(t)
	if href := d.Find(`[data-testid="plan-history"]`).AttrOr("href", ""); href != "/admin/history?plan="+p.Slug {
		t.Errorf("plan history link %q", href)
	}
	if count(d, "shadow-table") != 1 || count(d, "shadow-empty") != 1 {
		t.Fatalf("a plan with a shadow tier and no would-be rejections: want the table, empty")
	}
	now := time.Now()
	for range 6 {
		h.rec.RecordShadow(httplimit.ShadowRejection{Plan: p.Slug, Tier: plans.PolicyName(p.Slug, "trial"), Subject: h.devCaller.Subject, Key: h.devCaller.Key, At: now})
	}
	h.rec.RecordShadow(httplimit.ShadowRejection{Plan: p.Slug, Tier: plans.PolicyName(p.Slug, "trial"), Subject: h.devCaller.Subject, Key: h.devCaller.Key, At: now.Add(-3 * time.Hour)})
	h.flush()
	d = op.get("/admin/plans/"+strconv.FormatInt(p.ID, 10), nil).doc(t)
	rows := d.Find(`[data-testid="shadow-row"]`)
	if rows.Length() != 1 {
		t.Fatalf("%d shadow rows, want 1", rows.Length())
	}
	if tier := rows.AttrOr("data-tier", ""); tier != "trial" {
		t.Errorf("tier %q, want trial, as the tiers table names it", tier)
	}
	if c := strings.TrimSpace(rows.Find(`[data-testid="shadow-caller"]`).Text()); c != "=cmd|calc ("+developerEmail+")" {
		t.Errorf("caller %q, want the key and its developer", c)
	}
	if hr, day := strings.TrimSpace(rows.Find(`[data-testid="shadow-hour"]`).Text()), strings.TrimSpace(rows.Find(`[data-testid="shadow-day"]`).Text()); hr != "6" || day != "7" {
		t.Errorf("last hour %s, last day %s, want 6 and 7", hr, day)
	}
}
