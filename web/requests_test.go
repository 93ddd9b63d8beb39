package web_test

import (
	"context"
	"encoding/csv"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"github.com/sluicehq/sluice/internal/requestlog"
	"github.com/sluicehq/sluice/internal/users"
	"github.com/sluicehq/sluice/web"
)

// requestLogEnv is a UI with a request log holding, within the last
// minutes: the test developer's key admitted once through the proxy and
// rejected twice by "gold-search" (Retry-After 7 s); another developer's
// key rejected once; an anonymous caller rejected once.
type requestLogEnv struct {
	*env
	devKey, otherKey int64
	otherKeyPrefix   string
	// now is when the rows were written, relative to which they are placed.
	now time.Time
}

func newRequestLogEnv(t *testing.T) requestLogEnv {
	t.Helper()
	e := newEnvWith(t, func(d *web.Deps) {
		d.RequestLog, d.RequestLogAdmitSample, d.RequestLogRetention = requestlog.NewReader(d.Pool), 1, 7*24*time.Hour
	})
	other, err := e.users.Create(context.Background(), users.NewUser{Email: "other@example.com", Password: testPassword, Role: users.RoleDeveloper})
	if err != nil {
		t.Fatal(err)
	}
	k, _ := e.createKey(e.dev.ID, "dev key")
	o, _ := e.createKey(other.ID, "other key")
	now := time.Now().UTC()
	w := requestlog.NewWriter(e.pool, requestlog.Options{AdmitSample: 1})
	rejected := func(at time.Time, user, key int64) requestlog.Entry {
		return requestlog.Entry{At: at, WayIn: requestlog.WayMiddleware, Outcome: requestlog.Rejected, Plan: "gold",
			Route: "GET /api/search", UserID: user, KeyID: key, Layer: "gold-search", RetryAfter: 7 * time.Second, Status: 429}
	}
	w.Log(requestlog.Entry{At: now.Add(-5 * time.Minute), WayIn: requestlog.WayProxy, Outcome: requestlog.Admitted, Plan: "gold",
		Route: "GET /api/items/{id}", UserID: e.dev.ID, KeyID: k.ID, Status: 200, UpstreamStatus: 200, Latency: 12 * time.Millisecond})
	w.Log(rejected(now.Add(-4*time.Minute), e.dev.ID, k.ID))
	w.Log(rejected(now.Add(-3*time.Minute), e.dev.ID, k.ID))
	w.Log(rejected(now.Add(-3*time.Minute), other.ID, o.ID))
	anon := rejected(now.Add(-2*time.Minute), 0, 0)
	anon.Plan, anon.Layer, anon.Addr = "anon", "anon-search", netip.MustParseAddr("203.0.113.9")
	w.Log(anon)
	if err := w.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	return requestLogEnv{env: e, devKey: k.ID, otherKey: o.ID, otherKeyPrefix: o.Prefix, now: now}
}

// requestRows is each row of a request log page as caller|outcome|layer|retry.
func requestRows(t *testing.T, res response) []string {
	t.Helper()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", res.StatusCode, res.body)
	}
	var out []string
	res.doc(t).Find(`[data-testid="request-row"]`).Each(func(_ int, s *goquery.Selection) {
		cell := func(id string) string { return strings.TrimSpace(s.Find(`[data-testid="` + id + `"]`).Text()) }
		caller, _, _ := strings.Cut(cell("request-caller"), " (")
		out = append(out, caller+"|"+cell("request-outcome")+"|"+cell("request-layer")+"|"+cell("request-retry"))
	})
	return out
}

func TestDevelopersSeeTheirOwnRequestsOnly(t *testing.T) {
	e := newRequestLogEnv(t)
	dev := e.signedIn(developerEmail)
	mine := []string{"dev key|rejected|gold-search|7 s", "dev key|rejected|gold-search|7 s", "dev key|admitted||"}
	for _, tt := range []struct {
		name, query string
		want        []string
	}{
		{"Everything", "", mine},
		{"Rejected", "?outcome=rejected", mine[:2]},
		{"OwnKey", "?key=" + strconv.FormatInt(e.devKey, 10), mine},
		// Another developer's key, the operator's fields: still only mine.
		{"AnothersKey", "?key=" + strconv.FormatInt(e.otherKey, 10), nil},
		{"OperatorFieldsIgnored", "?developer=other%40example.com&address=203.0.113.0%2F24", mine},
		{"Status", "?status=4xx", mine[:2]},
		{"Route", "?route=" + url.QueryEscape("GET /api/items/{id}"), mine[2:]},
		{"Layer", "?layer=gold-search", mine[:2]},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := requestRows(t, dev.get("/app/requests"+tt.query, nil))
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("rows\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
	t.Run("UpstreamShown", func(t *testing.T) {
		d := dev.get("/app/requests?outcome=admitted", nil).doc(t)
		if got := text(d, "request-upstream"); got != "200 in 12 ms" {
			t.Errorf("upstream %q, want 200 in 12 ms", got)
		}
		if got := text(d, "request-way"); got != "proxy" {
			t.Errorf("way in %q, want proxy", got)
		}
	})
	t.Run("CSVHoldsOnlyMine", func(t *testing.T) {
		res := dev.get("/app/requests.csv?key="+strconv.FormatInt(e.otherKey, 10), nil)
		rows, err := csv.NewReader(strings.NewReader(res.body)).ReadAll()
		if err != nil || len(rows) != 1 {
			t.Errorf("another's key in CSV: %q (%v), want the header alone", rows, err)
		}
		res = dev.get("/app/requests.csv", nil)
		if ct := res.Header.Get("Content-Type"); ct != "text/csv; charset=utf-8" {
			t.Errorf("Content-Type %q", ct)
		}
		rows, err = csv.NewReader(strings.NewReader(res.body)).ReadAll()
		if err != nil || len(rows) != 4 {
			t.Fatalf("CSV %q (%v), want a header and my 3 rows", rows, err)
		}
		for _, r := range rows[1:] {
			if r[9] != developerEmail || r[6] != "dev key" {
				t.Errorf("CSV row %q is not mine", r)
			}
		}
		if r := rows[1]; r[2] != "rejected" || r[12] != "gold-search" || r[13] != "7" || r[11] != "429" {
			t.Errorf("newest row %q, want a rejection by gold-search, Retry-After 7, status 429", r)
		}
	})
	t.Run("OperatorPagesRefused", func(t *testing.T) {
		for _, path := range []string{"/admin/requests", "/admin/requests.csv"} {
			if res := dev.get(path, nil); res.StatusCode != http.StatusForbidden {
				t.Errorf("%s: status %d, want 403", path, res.StatusCode)
			}
		}
	})
}

func TestOperatorsSearchEveryRequest(t *testing.T) {
	e := newRequestLogEnv(t)
	op := e.signedIn(operatorEmail)
	all := requestRows(t, op.get("/admin/requests", nil))
	if len(all) != 5 || all[0] != "anonymous, 203.0.113.0/24|rejected|anon-search|7 s" {
		t.Fatalf("rows %q, want all 5, the anonymous one newest", all)
	}
	for _, tt := range []struct {
		name, query string
		want        int
	}{
		{"DeveloperByEmail", "?developer=other%40example.com", 1},
		{"DeveloperByID", "?developer=" + strconv.FormatInt(e.dev.ID, 10), 3},
		{"KeyByID", "?key=" + strconv.FormatInt(e.devKey, 10), 3},
		{"KeyByPrefix", "?key=" + url.QueryEscape(e.otherKeyPrefix), 1},
		{"AddressBlock", "?address=203.0.113.0%2F24", 1},
		{"Plan", "?plan=anon", 1},
		{"Layer", "?layer=gold-search", 3},
		{"Status", "?status=429", 4},
		{"Outcome", "?outcome=admitted", 1},
		// To the minute after the rows of 3 minutes ago: the anonymous
		// row, a minute later, is left out.
		{"TimeRange", "?from=" + e.now.Add(-time.Hour).Format("2006-01-02T15:04") + "&to=" + e.now.Add(-3*time.Minute).Truncate(time.Minute).Add(time.Minute).Format("2006-01-02T15:04"), 4},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := requestRows(t, op.get("/admin/requests"+tt.query, nil)); len(got) != tt.want {
				t.Errorf("%d rows %q, want %d", len(got), got, tt.want)
			}
		})
	}
	for _, tt := range []struct{ query, field string }{
		{"?range=2y", "range"},
		{"?status=42", "status"},
		{"?status=9xx", "status"},
		{"?outcome=maybe", "outcome"},
		{"?address=nowhere", "address"},
		{"?developer=nobody%40example.com", "developer"},
		{"?developer=-3", "developer"},
		{"?key=sk_live_nothing_like_it", "key"},
		{"?from=yesterday", "from"},
		{"?after=1.x", "after"},
		{"?from=2026-01-02T10:00&to=2026-01-01T10:00", "to"},
	} {
		t.Run("Refuses "+tt.query, func(t *testing.T) {
			res := op.get("/admin/requests"+tt.query, nil)
			if res.StatusCode != http.StatusBadRequest || !strings.Contains(res.body, "&#34;"+tt.field+"&#34;") {
				t.Errorf("status %d, want 400 naming %q: %s", res.StatusCode, tt.field, text(res.doc(t), "error-message"))
			}
		})
	}
	t.Run("Pages", func(t *testing.T) {
		// 50 more rows: the first page holds 50, the next the other 5.
		w := requestlog.NewWriter(e.pool, requestlog.Options{AdmitSample: 1})
		for i := range 50 {
			w.Log(requestlog.Entry{At: time.Now().UTC().Add(-time.Duration(i) * time.Second), WayIn: requestlog.WayCheck,
				Outcome: requestlog.Rejected, Plan: "gold", UserID: e.dev.ID, KeyID: e.devKey, Layer: "gold-all", Status: 429})
		}
		if err := w.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		d := op.get("/admin/requests", nil).doc(t)
		if n := count(d, "request-row"); n != 50 {
			t.Fatalf("%d rows on the first page, want 50", n)
		}
		older, ok := d.Find(`[data-testid="requests-older"]`).Attr("href")
		if !ok {
			t.Fatal("no Older link")
		}
		if got := requestRows(t, op.get(older, nil)); len(got) != 5 {
			t.Errorf("%d rows on the second page, want 5", len(got))
		}
	})
}
